package lb

import (
	"context"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// A paused health check probes no more and keeps every verdict, whatever the targets answer;
// resuming probes again and judges from there.
func TestPausedHealthKeepsState(t *testing.T) {
	var probes atomic.Int64
	var failing atomic.Bool
	b := newBackend(t, "b0", nil)
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			probes.Add(1)
			if failing.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
			}
			return
		}
		w.WriteHeader(http.StatusInternalServerError)
	})
	cfg := Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(b)})}}
	lb := startLB(t, EngineFast, cfg)
	waitHealthy(t, lb, 1)

	paused := lb.Config()
	paused.Listeners[0].HealthCheck.Paused = true
	if err := lb.Apply(paused); err != nil {
		t.Fatal(err)
	}
	failing.Store(true)
	// Passive checks are paused too: 5xx answers in a row eject nobody.
	c := newClient()
	for range 10 {
		if code, _, _ := get(t, c, url(lb, "/")); code != http.StatusInternalServerError {
			t.Fatalf("GET answered %d, want the target's 500", code)
		}
	}
	// Wait until no probe has come for ten intervals (one may have been in flight at the pause).
	last, since := probes.Load(), time.Now()
	waitFor(t, 5*time.Second, "the probes to stop", func() bool {
		if n := probes.Load(); n != last {
			last, since = n, time.Now()
		}
		return time.Since(since) > 10*100*time.Millisecond
	})
	if s := stateOf(lb, "b0"); s != StateHealthy {
		t.Fatalf("paused target is %s, want it to stay healthy", s)
	}

	if err := lb.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the resumed checks to find the target unhealthy", func() bool {
		return stateOf(lb, "b0") == StateUnhealthy
	})
}

// Applying the config the load balancer already has changes nothing: the socket stays, a
// client's keep-alive connection stays, and the targets keep their verdicts without a probe
// more than their interval makes. A controller re-syncing a load balancer relies on it.
func TestApplyEqualConfigKeepsEverything(t *testing.T) {
	b := newBackend(t, "b0", nil)
	cfg := Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(b)})}}
	lb := startLB(t, EngineFast, cfg)
	waitHealthy(t, lb, 1)
	addr := lb.Addr("web/http").String()

	var conns atomic.Int64
	c := newClient()
	c.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		conns.Add(1)
		return net.Dial(network, address)
	}
	get(t, c, url(lb, "/"))
	for range 3 {
		if err := lb.Apply(lb.Config()); err != nil {
			t.Fatal(err)
		}
		if err := lb.Apply(cfg); err != nil {
			t.Fatal(err)
		}
		if s := stateOf(lb, "b0"); s != StateHealthy {
			t.Fatalf("target is %s after applying the same config, want healthy", s)
		}
		if code, _, _ := get(t, c, url(lb, "/")); code != http.StatusOK {
			t.Fatalf("GET answered %d", code)
		}
	}
	if got := lb.Addr("web/http").String(); got != addr {
		t.Fatalf("listener moved from %s to %s", addr, got)
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("the client opened %d connections, want its first kept alive across the applies", n)
	}
}
