// Package e2e holds herd's end-to-end tests: a real `herd up` with the local provider, real
// one-node Kubernetes instances of examples/hello, and real HTTP load through herd's load
// balancer. They need root and the host dependencies (make deps, make kubernetes) and skip
// otherwise, and under -short.
package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agent/cgroups"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

const (
	helloPort = 30080
	fleetName = "failover"
	replicas  = 3
	clients   = 8
	// clientPace spaces each client's requests (8 clients: at most 800 a second). An unpaced load
	// saturates a 2-core machine, and then the replacement's boot measures the machine, not herd.
	clientPace = 10 * time.Millisecond
	bootLimit  = 4 * time.Minute
	// gracePeriod is the instances' boot grace period. Healing replaces a booting instance that is
	// still unhealthy after it, and a replacement booting on a busy 2-core machine can take 20-40 s:
	// a shorter grace turns the failover into a loop of replaced replacements.
	gracePeriod = 45 * time.Second
)

// env is one herd up with the local provider on a data directory of the test's own.
type env struct {
	t       *testing.T
	root    string // module root
	dir     string // short temporary directory: config, data dir, logs
	data    string // herd up's data directory
	bin     string
	up      *exec.Cmd
	upDone  chan struct{}
	upLog   string
	lbPort  int
	mu      sync.Mutex
	created map[string]bool // every instance name seen
	// regions and clientNets are the region networks and client networks of the local
	// provider the test uses besides the default region, checked for leftovers too.
	regions, clientNets []string
	// upArgs are more flags for herd up, upEnv more variables of its environment.
	upArgs, upEnv []string
	// stopped, when set, runs once herd up has stopped, before the check for leftovers, and
	// returns what else the test made on the host, checked too.
	stopped func() localtest.Owned
}

// newEnv is a test's own herd and data directory. It runs the steps (withHello, building: image
// builds, which need no exclusive access) and then takes localtest.Exclusive, so that a build
// never holds up another package's real instances.
func newEnv(t *testing.T, steps ...func(*env)) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("real instances: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("real instances need root (network namespaces, bridges, cgroups)")
	}
	// Short: containerd's sockets live under the data directory, and a unix socket path has at
	// most 104 usable bytes (t.TempDir() is too long for that).
	dir, err := os.MkdirTemp("", "hf-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, data: filepath.Join(dir, "d"), bin: filepath.Join(dir, "herd"),
		upLog: filepath.Join(dir, "up.log"), created: map[string]bool{}}
	localtest.CleanupOnInterrupt(t, func() { os.RemoveAll(dir) })
	e.installHerd()
	if err := local.CheckHost(e.bin); err != nil {
		t.Skipf("real instances cannot run here (run make deps and make kubernetes): %v", err)
	}
	for _, step := range steps {
		step(e)
	}
	localtest.Exclusive(t)
	return e
}

func (e *env) herd(args ...string) (string, error) {
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(e.dir, "config"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitFor polls cond until it returns "" or timeout passes, then fails with cond's last word.
func (e *env) waitFor(timeout, every time.Duration, cond func() string) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("after %s: %s", timeout, msg)
		}
		select {
		case <-time.After(every):
		case <-e.upDone:
			if msg := cond(); msg == "" {
				return
			}
			log, _ := os.ReadFile(e.upLog)
			e.t.Fatalf("herd up exited while waiting (%s):\n%s", msg, tail(string(log), 40))
		}
	}
}

// subtest runs step as the subtest name of t, with the env's waits failing the subtest while it
// runs: scenarios run their steps one after the other on the same instances.
func (e *env) subtest(t *testing.T, name string, step func(t *testing.T)) {
	t.Run(name, func(st *testing.T) {
		e.t = st
		defer func() { e.t = t }()
		step(st)
	})
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// startHelloEnv is a herd up with the hello image built, cleaned up and checked for leftovers at
// the end of the test, and a free port for the fleet's listener.
func startHelloEnv(t *testing.T) *env {
	e := newEnv(t, withHello)
	before := localtest.Take(t)
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	e.startUp()
	e.lbPort = freeport.TCP(t)
	return e
}

func (e *env) startUp() {
	e.t.Helper()
	logf, err := os.Create(e.upLog)
	if err != nil {
		e.t.Fatal(err)
	}
	args := append([]string{"up", "--provider", "local", "--data-dir", e.data, "--listen", "127.0.0.1:0", "--lb-address", "127.0.0.1"}, e.upArgs...)
	e.up = exec.Command(e.bin, args...)
	e.up.Env = append(append(os.Environ(), "HERD_CONFIG="+filepath.Join(e.dir, "config")), e.upEnv...)
	e.up.Stdout, e.up.Stderr = logf, logf
	if err := e.up.Start(); err != nil {
		e.t.Fatal(err)
	}
	e.upDone = make(chan struct{})
	go func() { _ = e.up.Wait(); logf.Close(); close(e.upDone) }()
	e.waitFor(30*time.Second, 100*time.Millisecond, func() string {
		if out, err := e.herd("get", "fleets"); err != nil {
			return "herd get fleets: " + strings.TrimSpace(out)
		}
		return ""
	})
}

func (e *env) instances() []v1alpha1.Instance {
	out, err := e.herd("get", "instances", "-o", "json")
	if err != nil {
		return nil
	}
	var ins []v1alpha1.Instance
	if json.Unmarshal([]byte(out), &ins) != nil {
		return nil
	}
	e.mu.Lock()
	for _, in := range ins {
		e.created[in.Metadata.Name] = true
	}
	e.mu.Unlock()
	return ins
}

// fleet returns the fleet called name as herd up has it, or nil when herd get fails.
func (e *env) fleet(name string) *v1alpha1.Fleet {
	out, err := e.herd("get", "fleet", name, "-o", "json")
	if err != nil {
		return nil
	}
	var f v1alpha1.Fleet
	if json.Unmarshal([]byte(out), &f) != nil {
		return nil
	}
	return &f
}

// applyFleet writes a Fleet's YAML to the test's fleet file and applies it.
func (e *env) applyFleet(yaml []byte) {
	e.t.Helper()
	file := filepath.Join(e.dir, "fleet.yaml")
	if err := os.WriteFile(file, yaml, 0o600); err != nil {
		e.t.Fatal(err)
	}
	if out, err := e.herd("apply", "-f", file); err != nil {
		e.t.Fatalf("herd apply: %v\n%s", err, out)
	}
}

// waitServing waits until n instances are Ready and healthy in the load balancer, and returns
// them.
func (e *env) waitServing(n int) []v1alpha1.Instance {
	e.t.Helper()
	var ready []v1alpha1.Instance
	e.waitFor(bootLimit, 500*time.Millisecond, func() string {
		ready = ready[:0]
		var states []string
		for _, in := range e.instances() {
			states = append(states, fmt.Sprintf("%s %s/%s", in.Metadata.Name, in.Status.Phase, in.Status.LBHealth))
			if in.Status.Phase == v1alpha1.PhaseReady && in.Status.LBHealth == controller.HealthHealthy {
				ready = append(ready, in)
			}
		}
		if len(ready) != n {
			return fmt.Sprintf("want %d instances Ready and healthy, have: %s", n, strings.Join(states, ", "))
		}
		return ""
	})
	return ready
}

// fleets returns the names of the fleets herd up has.
func (e *env) fleets() []string {
	out, err := e.herd("get", "fleets", "-o", "json")
	if err != nil {
		e.t.Logf("herd get fleets: %v %s", err, out)
		return nil
	}
	var list []v1alpha1.Fleet
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		e.t.Logf("herd get fleets: %v", err)
		return nil
	}
	var names []string
	for _, f := range list {
		names = append(names, f.Metadata.Name)
	}
	return names
}

// cleanup deletes every fleet, stops herd up, removes whatever instance is left through the
// provider's data directory (when herd up died) and checks that nothing is left on the host.
func (e *env) cleanup(before localtest.Snapshot) {
	t := e.t
	if e.up != nil {
		select {
		case <-e.upDone:
		default:
			for _, name := range e.fleets() {
				if out, err := e.herd("delete", "fleet", name); err != nil {
					t.Logf("delete fleet %s: %v %s", name, err, out)
				}
			}
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				if ins := e.instances(); ins != nil && len(ins) == 0 {
					break
				}
				select {
				case <-time.After(250 * time.Millisecond):
				case <-e.upDone:
				}
			}
			_ = e.up.Process.Signal(syscall.SIGINT)
			select {
			case <-e.upDone:
			case <-time.After(time.Minute):
				t.Errorf("herd up did not stop within a minute of SIGINT; killing it")
				_ = e.up.Process.Kill()
				<-e.upDone
			}
		}
		if t.Failed() {
			log, _ := os.ReadFile(e.upLog)
			t.Logf("herd up log (tail):\n%s", tail(string(log), 60))
		}
	}
	var more localtest.Owned
	if e.stopped != nil {
		more = e.stopped()
	}
	p, err := local.New(local.Options{DataDir: e.data, HerdBinary: e.bin})
	if err != nil {
		t.Errorf("local provider for cleanup: %v", err)
		return
	}
	ctx := context.Background()
	if left, err := p.List(ctx, provider.ListOptions{}); err == nil {
		for _, in := range left {
			e.created[in.Name] = true
			t.Errorf("instance %s left after herd up stopped; deleting it", in.Name)
			if err := p.Delete(ctx, in.Name); err != nil {
				t.Errorf("delete %s: %v", in.Name, err)
			}
		}
	}
	o := localtest.Owned{Dirs: []string{e.data}, Links: []string{p.BridgeName("local")}}
	for _, r := range e.regions {
		router, internet, veth := p.Lab().RegionHostNames(r)
		o.Netns = append(o.Netns, router, internet)
		o.Links = append(o.Links, veth, p.BridgeName(r))
	}
	for _, c := range e.clientNets {
		o.Netns = append(o.Netns, p.Lab().ClientNetns(c))
	}
	for n := range e.created {
		ns, veth, cg := local.HostNames(n)
		o.Netns = append(o.Netns, ns)
		o.Links = append(o.Links, veth)
		o.Cgroups = append(o.Cgroups, strings.TrimPrefix(cg, "/"))
		o.Gone = append(o.Gone, p.InstanceDir(n))
	}
	o.Dirs, o.Gone = append(o.Dirs, more.Dirs...), append(o.Gone, more.Gone...)
	o.Netns, o.Links, o.Cgroups = append(o.Netns, more.Netns...), append(o.Links, more.Links...), append(o.Cgroups, more.Cgroups...)
	localtest.AssertClean(t, before, o)
}

// result is one GET through the load balancer.
type result struct {
	at       time.Time // when the response (or error) arrived
	instance string    // the instance the hello app names
	err      error
}

// load runs keep-alive clients against a URL and records every result.
type load struct {
	mu      sync.Mutex
	results []result
	stop    chan struct{}
	wg      sync.WaitGroup
}

// startLoad runs n keep-alive clients against url until stop is closed or limit passes. Each
// client sends its next GET as soon as it has the answer to the last one or, with pace > 0, at
// most one every pace.
func startLoad(url string, n int, pace, limit time.Duration) *load {
	return startLoadWith(func() *http.Client {
		return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
	}, url, n, pace, limit)
}

// startLoadWith is startLoad with each client's HTTP client made by newClient.
func startLoadWith(newClient func() *http.Client, url string, n int, pace, limit time.Duration) *load {
	l := &load{stop: make(chan struct{})}
	end := time.Now().Add(limit)
	for range n {
		client := newClient()
		l.wg.Go(func() {
			defer client.CloseIdleConnections()
			var tick <-chan time.Time
			if pace > 0 {
				t := time.NewTicker(pace)
				defer t.Stop()
				tick = t.C
			}
			for time.Now().Before(end) {
				if tick != nil {
					<-tick
				}
				select {
				case <-l.stop:
					return
				default:
				}
				r := get(client, url)
				l.mu.Lock()
				l.results = append(l.results, r)
				l.mu.Unlock()
			}
		})
	}
	return l
}

func get(client *http.Client, url string) result {
	resp, err := client.Get(url)
	if err != nil {
		return result{at: time.Now(), err: err}
	}
	instance, err := helloInstance(resp)
	return result{at: time.Now(), instance: instance, err: err}
}

// helloInstance reads and closes a response of the hello app and returns the instance it names;
// anything but a 200 naming an instance is an error.
func helloInstance(resp *http.Response) (string, error) {
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("status %d: %q", resp.StatusCode, body)
	}
	var reply struct {
		Instance string `json:"instance"`
	}
	if err := json.Unmarshal(body, &reply); err != nil || reply.Instance == "" {
		return "", fmt.Errorf("unexpected body %q", body)
	}
	return reply.Instance, nil
}

// since returns the results recorded after the first i.
func (l *load) since(i int) []result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]result(nil), l.results[i:]...)
}

// unanswered names one of names that has not answered a request yet, "" when all have.
func (l *load) unanswered(names map[string]bool) string {
	seen := map[string]bool{}
	for _, r := range l.since(0) {
		seen[r.instance] = true
	}
	for n := range names {
		if !seen[n] {
			return "no response from " + n + " yet"
		}
	}
	return ""
}

// waitAnswers waits until n more requests of l, from now on, are answered by instances for which
// newSet is true, so that the checks after it also cover traffic to the new set.
func (e *env) waitAnswers(l *load, n int, newSet func(instance string) bool) {
	e.t.Helper()
	from := len(l.since(0))
	e.waitFor(10*time.Second, 50*time.Millisecond, func() string {
		got := 0
		for _, r := range l.since(from) {
			if r.err == nil && newSet(r.instance) {
				got++
			}
		}
		if got < n {
			return fmt.Sprintf("%d of %d more answers from the new set", got, n)
		}
		return ""
	})
}

func (l *load) finish() []result {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	return l.since(0)
}

// killInstance kills -9 every process in the instance's cgroup subtree until none is left.
func killInstance(t *testing.T, name string) {
	_, _, root := local.HostNames(name)
	hs, err := cgroups.Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	if left := cgroups.KillAll(hs, root, nil, 10*time.Second); left > 0 {
		t.Fatalf("%d processes of %s still alive after kill -9", left, name)
	}
}

// TestIntegrationFailover kills -9 one of three real instances of the hello example under steady
// load through herd's load balancer, and checks that no request fails, that the load balancer
// stops sending the instance traffic and that a replacement serves. How soon (targets: 1 s and
// 20 s) is its figures line, which make bench-failover reports.
func TestIntegrationFailover(t *testing.T) {
	e := startHelloEnv(t)
	e.applyFleet(fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: hello
  replicas: {min: 1, max: 10, desired: %d}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1, gracePeriod: %s}
  regions: [{name: local, provider: local}]
`, fleetName, replicas, e.lbPort, helloPort, helloPort, gracePeriod))
	ready := e.waitServing(replicas)
	original := map[string]bool{}
	for _, in := range ready {
		original[in.Metadata.Name] = true
	}
	victim := ready[0]
	name := victim.Metadata.Name

	url := fmt.Sprintf("http://127.0.0.1:%d/", e.lbPort)
	l := startLoad(url, clients, clientPace, 3*gracePeriod+bootLimit)
	defer l.finish()
	// Steady state: every instance serves, and the victim is out of its boot grace period (so
	// that failing health checks count against it).
	e.waitFor(gracePeriod+30*time.Second, 50*time.Millisecond, func() string {
		if msg := l.unanswered(original); msg != "" {
			return msg
		}
		if victim.Status.CreatedAt != nil && time.Since(*victim.Status.CreatedAt) < gracePeriod+time.Second {
			return "the victim is still in its boot grace period"
		}
		return ""
	})

	killedAt := time.Now()
	killInstance(t, name)
	t.Logf("killed every process of %s in %s", name, time.Since(killedAt).Round(time.Millisecond))

	// Ejection as the load balancer reports it: the victim's health is no longer healthy (or it
	// is gone). Polled through the API, so the figure includes up to one poll's latency.
	var ejected time.Duration
	e.waitFor(10*time.Second, 10*time.Millisecond, func() string {
		ins := e.instances()
		if ins == nil {
			return "herd get instances failed"
		}
		for _, in := range ins {
			if in.Metadata.Name == name && in.Status.LBHealth == controller.HealthHealthy {
				return name + " still healthy in the load balancer"
			}
		}
		ejected = time.Since(killedAt)
		return ""
	})

	// Replacement: the first response through the load balancer from an instance that was not
	// one of the original three.
	var replacement time.Duration
	var newName string
	e.waitFor(bootLimit, 50*time.Millisecond, func() string {
		e.instances() // record names for the leak check
		for _, r := range l.since(0) {
			if r.err == nil && r.instance != "" && !original[r.instance] {
				replacement, newName = r.at.Sub(killedAt), r.instance
				return ""
			}
		}
		return "no response from a replacement instance yet"
	})
	// A little more load on the new set, then stop.
	e.waitAnswers(l, 200, func(instance string) bool { return instance == newName })
	results := l.finish()

	failed := 0
	var lastVictim time.Time
	perInstance := map[string]int{}
	for _, r := range results {
		if r.err != nil {
			failed++
			if failed <= 10 {
				t.Logf("failed request at kill%+dms: %v", r.at.Sub(killedAt).Milliseconds(), r.err)
			}
			continue
		}
		perInstance[r.instance]++
		if r.instance == name && r.at.After(lastVictim) {
			lastVictim = r.at
		}
	}
	t.Logf("%d requests through the load balancer, per instance: %v", len(results), perInstance)
	t.Logf("last response from %s at kill%+dms; load balancer reported it unhealthy after %d ms; replacement %s served after %.2f s",
		name, lastVictim.Sub(killedAt).Milliseconds(), ejected.Milliseconds(), newName, replacement.Seconds())
	t.Logf("failover: failed_requests=%d ejection_ms=%d replacement_ready_s=%.2f", failed, ejected.Milliseconds(), replacement.Seconds())
	// The ejection and replacement times are figures for make bench-failover to print (targets:
	// 1 s and 20 s), not assertions: wall-clock limits fail on a busy machine, not on a regression.
	if failed != 0 {
		t.Errorf("%d of %d requests failed, want 0", failed, len(results))
	}
}
