package lb

import (
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// regionListener is a listener whose groups are regions (GroupNearest), one target each, with
// active checks off so that the test sets each target's round-trip time.
func regionListener(regions ...*backend) Listener {
	l := httpListener()
	l.GroupPolicy = GroupNearest
	l.HealthCheck.Disabled = true
	for _, b := range regions {
		l.Groups = append(l.Groups, TargetGroup{Name: b.name, Targets: targets(b)})
	}
	return l
}

// targetOf returns the routed target named id of the listener web/http.
func targetOf(t *testing.T, lb *LB, id string) *target {
	t.Helper()
	for _, g := range lb.listeners["web/http"].state.Load().routes.groups {
		for _, tg := range g.targets {
			if tg.key.id == id {
				return tg
			}
		}
	}
	t.Fatalf("no target %s", id)
	return nil
}

func TestGroupNearestPicksTheNearestUsableGroup(t *testing.T) {
	far, near, unmeasured := newBackend(t, "far", nil), newBackend(t, "near", nil), newBackend(t, "unmeasured", nil)
	lb := startLB(t, EngineFast, Config{Listeners: []Listener{regionListener(unmeasured, far, near)}})
	targetOf(t, lb, "far").rtt.Store(int64(60 * time.Millisecond))
	targetOf(t, lb, "near").rtt.Store(int64(10 * time.Millisecond))
	c := newClient()
	expect := func(want string) {
		t.Helper()
		for range 10 {
			if code, got, _ := get(t, c, url(lb, "/")); code != http.StatusOK || got != want {
				t.Fatalf("got %d from %q, want every request on %s", code, got, want)
			}
		}
	}
	expect("near")
	// Distances change: the next requests follow.
	targetOf(t, lb, "far").rtt.Store(int64(5 * time.Millisecond))
	expect("far")
	// An unusable group is skipped, however near.
	targetOf(t, lb, "far").ejected.Store(true)
	expect("near")
	targetOf(t, lb, "near").healthy.Store(false)
	expect("unmeasured") // measured ones first, then the config order
	targetOf(t, lb, "unmeasured").draining.Store(true)
	if code, _, _ := get(t, c, url(lb, "/")); code != http.StatusServiceUnavailable {
		t.Errorf("no usable group: %d, want 503", code)
	}
}

// TestGroupNearestRetriesOnTheNextRegion: an idempotent request whose nearest region breaks off
// before answering is retried once on the next nearest; a POST that was sent is not.
func TestGroupNearestRetriesOnTheNextRegion(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		breaker := newBackend(t, "breaker", func(w http.ResponseWriter, r *http.Request) {
			if c, _, err := http.NewResponseController(w).Hijack(); err == nil {
				c.Close()
			}
		})
		second, third := newBackend(t, "second", nil), newBackend(t, "third", nil)
		l := regionListener(third, breaker, second)
		l.HealthCheck.EjectionTime = Duration(time.Hour)
		l.HealthCheck.MaxEjectionTime = Duration(time.Hour)
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		targetOf(t, lb, "breaker").rtt.Store(int64(10 * time.Millisecond))
		targetOf(t, lb, "second").rtt.Store(int64(20 * time.Millisecond))
		targetOf(t, lb, "third").rtt.Store(int64(30 * time.Millisecond))
		c := newClient()

		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodDelete} {
			targetOf(t, lb, "breaker").ejected.Store(false)
			hits := breaker.hits.Load()
			req, _ := http.NewRequest(method, url(lb, "/"), nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("%s: %v", method, err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("X-Backend") != "second" || breaker.hits.Load() != hits+1 {
				t.Fatalf("%s: %d from %q after %d tries on the nearest; want 200 from the next nearest after one",
					method, resp.StatusCode, resp.Header.Get("X-Backend"), breaker.hits.Load()-hits)
			}
		}
		if s := stateOf(lb, "breaker"); s != StateEjected {
			t.Errorf("the region that broke off is %s, want ejected", s)
		}

		targetOf(t, lb, "breaker").ejected.Store(false)
		hits := breaker.hits.Load()
		resp, err := c.Post(url(lb, "/"), "text/plain", strings.NewReader("order=1"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadGateway || breaker.hits.Load() != hits+1 {
			t.Errorf("POST: %d after %d tries, want 502 and no retry of a sent body", resp.StatusCode, breaker.hits.Load()-hits)
		}
		if second.hits.Load() != 4 || third.hits.Load() != 0 {
			t.Errorf("hits: second %d, third %d; want 4 and 0 (one retry each, on the next nearest)", second.hits.Load(), third.hits.Load())
		}
	})
}

// TestCloseOnUnhealthyRetriesRequestsInFlight: a request waiting on a region that stops answering
// (its checks fail, as in a partition) is broken off when the checks find the region unhealthy,
// and retried on the other region, long before the response timeout.
func TestCloseOnUnhealthyRetriesRequestsInFlight(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		release := make(chan struct{})
		// a never answers: the request waits until its connection is closed, or the test ends.
		a := newBackend(t, "a", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		b := newBackend(t, "b", nil)
		b.down.Store(true)
		t.Cleanup(func() { close(release) }) // before the servers close, which waits for their handlers
		l := httpListener(TargetGroup{Name: "a", Targets: targets(a)}, TargetGroup{Name: "b", Targets: targets(b)})
		l.GroupPolicy = GroupNearest
		l.HealthCheck.CloseOnUnhealthy = true
		l.HealthCheck.HealthyThreshold = 1
		l.Timeouts.Response = Duration(time.Minute)
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitFor(t, 10*time.Second, "a healthy, b unhealthy", func() bool {
			return stateOf(lb, "a") == StateHealthy && stateOf(lb, "b") == StateUnhealthy
		})

		type result struct {
			code    int
			backend string
		}
		done := make(chan result, 1)
		start := time.Now()
		go func() {
			resp, err := newClient().Get(url(lb, "/slow"))
			if err != nil {
				done <- result{code: -1, backend: err.Error()}
				return
			}
			resp.Body.Close()
			done <- result{resp.StatusCode, resp.Header.Get("X-Backend")}
		}()
		waitFor(t, 5*time.Second, "the request to wait on a", func() bool { return a.hits.Load() == 1 })
		b.down.Store(false)
		waitFor(t, 5*time.Second, "b healthy", func() bool { return stateOf(lb, "b") == StateHealthy })
		a.down.Store(true)
		select {
		case r := <-done:
			if r.code != http.StatusOK || r.backend != "b" {
				t.Fatalf("the request waiting on a got %d from %q, want 200 from b", r.code, r.backend)
			}
			t.Logf("%s: the request moved to b %s after it was sent", e, time.Since(start).Round(time.Millisecond))
		case <-time.After(20 * time.Second):
			t.Fatal("the request waiting on the unhealthy target was not broken off")
		}
	})
}

// TestActiveChecksMeasureRTT: HTTP and TCP checks both leave the kernel's round-trip time of their
// connections on the target (a loopback round trip here: tiny, but there).
func TestActiveChecksMeasureRTT(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_INFO is read on Linux only")
	}
	for _, path := range []string{"/healthz", ""} {
		b := newBackend(t, "b0", nil)
		l := httpListener(TargetGroup{Name: "v1", Targets: targets(b)})
		l.HealthCheck.Path = path
		lb := startLB(t, EngineFast, Config{Listeners: []Listener{l}})
		waitFor(t, 5*time.Second, "a measured round trip", func() bool {
			h := lb.Health()
			return len(h) == 1 && h[0].RTT > 0
		})
		if rtt := lb.Health()[0].RTT.D(); rtt > 100*time.Millisecond {
			t.Errorf("check path %q: loopback round trip %s", path, rtt)
		}
	}
}
