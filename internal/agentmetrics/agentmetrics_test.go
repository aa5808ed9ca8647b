package agentmetrics

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"herd.dev/herd/internal/agentauth"
)

const (
	interval = 2 * time.Second
	// timeout is real time (the scrape's context), unlike the interval, which only the fake clock
	// sees; it is short so that the hanging agent costs little.
	timeout = 200 * time.Millisecond
)

// How a fake agent answers.
const (
	modeOK      = ""
	modeHang    = "hang"
	mode500     = "500"
	modeGarbage = "garbage"
	modeMissing = "missing"
	modeGauge   = "gauge"
)

// fakeMemory is the working set every fake agent reports.
const fakeMemory = 300 << 20

// fakeAgent serves /metrics like a herd agent, with a CPU counter the test sets.
type fakeAgent struct {
	addr    string // the IP, as in Target.Address
	release chan struct{}
	metrics http.Handler

	mu         sync.Mutex
	cpu        float64
	mode       string
	hits       int    // requests served
	credential string // required of requests when set, as the real agent requires its instance's
}

func (a *fakeAgent) set(cpu float64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cpu = cpu
}

func (a *fakeAgent) get() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cpu
}

func (a *fakeAgent) setMode(mode string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.mode = mode
}

func (a *fakeAgent) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	mode := a.mode
	a.hits++
	a.mu.Unlock()
	switch mode {
	case modeHang:
		select {
		case <-r.Context().Done():
		case <-a.release:
		}
	case mode500:
		http.Error(w, "collector failed", http.StatusInternalServerError)
	case modeGarbage:
		fmt.Fprintln(w, "<html>this is not the metrics page</html>")
	case modeMissing:
		fmt.Fprint(w, "# TYPE herd_agent_ready gauge\nherd_agent_ready 1\n")
	case modeGauge:
		fmt.Fprint(w, "# TYPE herd_node_cpu_seconds_total gauge\nherd_node_cpu_seconds_total 5\n")
	default:
		a.metrics.ServeHTTP(w, r)
	}
}

// newAgents starts n fake agents on one port, each on its own loopback address (127.0.0.1,
// 127.0.0.2, ...), as the scraper sees instances: one port, many addresses.
func newAgents(t *testing.T, n int) (port int, agents []*fakeAgent) {
	t.Helper()
	for range 20 { // another test may hold the port on one of the addresses: try another port
		lns, err := listenAll(n)
		if err != nil {
			continue
		}
		for _, ln := range lns {
			a := &fakeAgent{addr: ln.Addr().(*net.TCPAddr).IP.String(), release: make(chan struct{})}
			// The real agent's encoding: a registry behind promhttp.
			reg := prometheus.NewRegistry()
			pods := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: podsMetric, Help: "Pods."}, []string{"phase"})
			pods.WithLabelValues("Running").Set(3)
			pods.WithLabelValues("Pending").Set(0)
			reg.MustRegister(
				prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: readyMetric, Help: "Ready."}, func() float64 { return 1 }),
				prometheus.NewCounterFunc(prometheus.CounterOpts{Name: cpuMetric, Help: "CPU time."}, a.get),
				prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: memoryMetric, Help: "Memory."}, func() float64 { return fakeMemory }),
				pods,
			)
			a.metrics = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
			mux := http.NewServeMux()
			mux.Handle("GET /metrics", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				a.mu.Lock()
				cred := a.credential
				a.mu.Unlock()
				if cred != "" {
					agentauth.Require(cred, a).ServeHTTP(w, r)
					return
				}
				a.ServeHTTP(w, r)
			}))
			srv := httptest.NewUnstartedServer(mux)
			srv.Listener.Close()
			srv.Listener = ln
			srv.Start()
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(a.release) }) // runs before srv.Close, which waits for handlers
			agents = append(agents, a)
		}
		return lns[0].Addr().(*net.TCPAddr).Port, agents
	}
	t.Fatalf("no free port on 127.0.0.1-%d", n)
	return 0, nil
}

func listenAll(n int) ([]net.Listener, error) {
	first, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	lns := []net.Listener{first}
	port := first.Addr().(*net.TCPAddr).Port
	for i := 2; i <= n; i++ {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%d", i, port))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}

// fakeClock is the scraper's clock; tests move it instead of sleeping.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is a scraper over fake agents; agent i is instance "i<i>" of fleet fleets[i].
type env struct {
	t       *testing.T
	clock   *fakeClock
	agents  []*fakeAgent
	targets atomic.Pointer[[]Target]
	logs    bytes.Buffer
	s       *Scraper
}

func newEnv(t *testing.T, fleets ...string) *env {
	port, agents := newAgents(t, len(fleets))
	e := &env{t: t, clock: &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}, agents: agents}
	var targets []Target
	for i, f := range fleets {
		targets = append(targets, Target{Fleet: f, Region: "r1", Revision: f + "-1", Instance: fmt.Sprintf("i%d", i), Address: agents[i].addr})
	}
	e.setTargets(targets...)
	s, err := New(Options{
		Targets:  func() []Target { return *e.targets.Load() },
		Interval: interval,
		Timeout:  timeout,
		Port:     port,
		Logger:   slog.New(slog.NewTextHandler(&e.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Now:      e.clock.Now,
	})
	if err != nil {
		t.Fatal(err)
	}
	e.s = s
	return e
}

func (e *env) setTargets(targets ...Target) { e.targets.Store(&targets) }

// pass runs one pass and fails the test if it does not return. The deadline is far above the
// scrape timeout: it catches a pass that hangs, it does not measure one.
func (e *env) pass() {
	e.t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.s.ScrapeOnce(context.Background())
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		e.t.Fatal("ScrapeOnce did not return")
	}
}

// passAt sets the agents' counters, runs a pass, and moves the clock one interval on.
func (e *env) passAt(cpus ...float64) {
	e.t.Helper()
	for i, c := range cpus {
		e.agents[i].set(c)
	}
	e.pass()
	e.clock.advance(interval)
}

func (e *env) wantCPU(fleet string, percent float64, instances int) {
	e.t.Helper()
	got, n, ok := e.s.FleetCPU(fleet)
	if !ok || n != instances || math.Abs(got-percent) > 1e-9 {
		e.t.Errorf("FleetCPU(%q) = %v, %d, %v; want %v, %d, true", fleet, got, n, ok, percent, instances)
	}
}

func (e *env) wantNone(fleet string) {
	e.t.Helper()
	if got, n, ok := e.s.FleetCPU(fleet); ok || n != 0 {
		e.t.Errorf("FleetCPU(%q) = %v, %d, %v; want no figure", fleet, got, n, ok)
	}
}

func TestFleetCPU(t *testing.T) {
	e := newEnv(t, "a", "a", "b")
	e.passAt(10, 20, 5)
	e.wantNone("a") // one scrape is no rate
	e.passAt(11, 22, 5.5)
	e.wantCPU("a", 75, 2) // (0.5 + 1 core) / 2 over 2s
	e.wantCPU("b", 25, 1)
	e.wantNone("c")
	e.passAt(15, 22, 5.5) // the rate is over the last two scrapes only
	e.wantCPU("a", 100, 2)
	e.wantCPU("b", 0, 1)
}

func TestBaselineReset(t *testing.T) {
	for _, tc := range []struct {
		name    string
		disturb func(e *env) // between a good rate and the pass that must not give one
	}{
		{"counter went down", func(e *env) { e.agents[0].set(1) }},
		{"address changed", func(e *env) {
			e.setTargets(Target{Fleet: "a", Instance: "i0", Address: e.agents[1].addr})
			e.agents[0] = e.agents[1] // passAt now sets the new machine's counter
			e.agents[0].set(1)
		}},
		{"gap longer than staleness", func(e *env) {
			e.clock.advance(staleIntervals * interval)
			e.wantNone("a") // the last rate is stale even without a pass
			e.agents[0].set(30)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, "a", "spare")
			e.passAt(10)
			e.passAt(12)
			e.wantCPU("a", 100, 1)
			tc.disturb(e)
			e.pass()
			e.clock.advance(interval)
			e.wantNone("a")
			e.passAt(e.agents[0].get() + 1)
			e.wantCPU("a", 50, 1)
		})
	}
}

func TestForgetsRemovedTargets(t *testing.T) {
	e := newEnv(t, "a", "a")
	e.passAt(10, 10)
	e.passAt(12, 11)
	e.wantCPU("a", 75, 2)
	all := *e.targets.Load()
	e.setTargets(all[0])
	e.passAt(14)
	e.wantCPU("a", 100, 1)
	if n := len(e.s.series); n != 1 {
		t.Errorf("%d instances kept after one was removed, want 1", n)
	}
	e.setTargets(all...) // back, it starts over: no rate across its absence
	e.passAt(16, 20)
	e.wantCPU("a", 100, 1)
}

func TestBadInstanceSkipped(t *testing.T) {
	for _, mode := range []string{modeHang, mode500, modeGarbage, modeMissing, modeGauge} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, "a", "a")
			e.agents[1].setMode(mode)
			e.passAt(10, 10)
			e.passAt(11, 20)
			e.wantCPU("a", 50, 1) // the good one counts alone
			if logs := e.logs.String(); !strings.Contains(logs, "scrape failed") || !strings.Contains(logs, "instance=i1") {
				t.Errorf("no Debug line for the failed scrape of i1:\n%s", logs)
			}
		})
	}
}

func TestStartStops(t *testing.T) {
	called := make(chan struct{}, 1)
	s, err := New(Options{
		Targets: func() []Target {
			select {
			case called <- struct{}{}:
			default:
			}
			return nil
		},
		Port: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Start(ctx) }()
	<-called // the first pass runs at once
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Start = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Start did not return after cancel")
	}
}

func TestNew(t *testing.T) {
	targets := func() []Target { return nil }
	for _, tc := range []struct {
		name    string
		opts    Options
		wantErr string // a word the error must name; "" for no error
	}{
		{"no targets", Options{Port: 10260}, "Targets"},
		{"no port", Options{Targets: targets}, "Port"},
		{"negative port", Options{Targets: targets, Port: -1}, "Port"},
		{"port too big", Options{Targets: targets, Port: 65536}, "Port"},
		{"negative interval", Options{Targets: targets, Port: 10260, Interval: -time.Second}, "Interval"},
		{"negative timeout", Options{Targets: targets, Port: 10260, Timeout: -time.Second}, "Timeout"},
		{"minimal", Options{Targets: targets, Port: 10260}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := New(tc.opts)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("New = %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("New = %v, want an error naming %s", err, tc.wantErr)
			case tc.wantErr != "":
				return
			}
			o := s.opts
			if o.Interval != 2*time.Second || o.Timeout != time.Second || o.Client.Timeout != time.Second || o.Now == nil || o.Logger == nil {
				t.Errorf("defaults not applied: %+v", o)
			}
			if tr, ok := o.Client.Transport.(*http.Transport); !ok || tr.Proxy != nil {
				t.Errorf("default client's transport %T uses a proxy from the environment", o.Client.Transport)
			}
		})
	}
}

func (a *fakeAgent) served() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hits
}

// An agent that keeps failing is asked again only after a backoff, so addresses without an agent
// cost no connection per pass; once it answers, it is scraped on every pass again.
func TestFailingAgentBacksOff(t *testing.T) {
	e := newEnv(t, "web")
	a := e.agents[0]
	a.setMode(mode500)
	for range failuresBeforeBackoff {
		e.passAt(1)
	}
	if n := a.served(); n != failuresBeforeBackoff {
		t.Fatalf("%d requests in %d passes, want one a pass until the backoff", n, failuresBeforeBackoff)
	}
	// The last failure was one interval ago; the next try is due backoffIntervals after it.
	for range backoffIntervals - 1 {
		e.passAt(1)
	}
	if n := a.served(); n != failuresBeforeBackoff {
		t.Fatalf("%d requests during the backoff, want none (%d before)", n-failuresBeforeBackoff, failuresBeforeBackoff)
	}
	a.setMode("")
	e.passAt(1)
	if n := a.served(); n != failuresBeforeBackoff+1 {
		t.Fatalf("%d requests when the backoff ended, want one more than %d", n, failuresBeforeBackoff)
	}
	e.passAt(2)
	e.passAt(3)
	if n := a.served(); n != failuresBeforeBackoff+3 {
		t.Fatalf("%d requests after the agent answered again, want one a pass (%d)", n, failuresBeforeBackoff+3)
	}
}

// TestScrapesCarryTheCredential: each agent is scraped with its own instance's credential, and an
// agent that refuses it, or an answer that does not prove the credential, is not counted.
func TestScrapesCarryTheCredential(t *testing.T) {
	keys, err := agentauth.NewKeyring([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "a", "a", "a")
	e.s.opts.Credential = keys.Credential
	e.agents[0].credential = keys.Credential("i0")
	e.agents[1].credential = keys.Credential("another instance") // refuses i1's credential
	// agents[2] asks for nothing and proves nothing: not taken for i2's agent.
	e.passAt(10, 10, 10)
	e.passAt(11, 20, 20)
	e.wantCPU("a", 50, 1)
}
