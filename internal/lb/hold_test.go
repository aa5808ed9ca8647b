package lb

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// heldGet does a GET in the background and delivers its status and answering backend.
func heldGet(t *testing.T, u string) <-chan [2]string {
	out := make(chan [2]string, 1)
	go func() {
		c := &http.Client{Timeout: 20 * time.Second}
		resp, err := c.Get(u)
		if err != nil {
			out <- [2]string{"error: " + err.Error(), ""}
			return
		}
		resp.Body.Close()
		out <- [2]string{resp.Status, resp.Header.Get("X-Backend")}
	}()
	return out
}

// answer waits for the outcome of a heldGet, or fails the test after 10 seconds.
func answer(t *testing.T, got <-chan [2]string, what string) [2]string {
	t.Helper()
	select {
	case r := <-got:
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("%s not answered", what)
		return [2]string{}
	}
}

func TestHoldServesOnceATargetIsHealthy(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		t.Run("target added by a config", func(t *testing.T) {
			l := httpListener()
			l.Hold = &Hold{Timeout: Duration(10 * time.Second)}
			lb := startLB(t, e, Config{Listeners: []Listener{l}})
			got := heldGet(t, url(lb, "/"))
			waitFor(t, 5*time.Second, "a held request", func() bool { return lb.Held("web") == 1 })
			if s, ok := lb.Metrics().Fleet("web"); !ok || s.Held != 1 {
				t.Fatalf("metrics: held %d, want 1", s.Held)
			}
			b := newBackend(t, "b0", nil)
			l.Groups = []TargetGroup{{Name: "v1", Targets: targets(b)}}
			if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
				t.Fatal(err)
			}
			if r := answer(t, got, "held request"); r[0] != "200 OK" || r[1] != "b0" {
				t.Fatalf("held request: %s from %q, want 200 from b0", r[0], r[1])
			}
			if n := lb.Held("web"); n != 0 {
				t.Fatalf("held after serving: %d", n)
			}
		})
		t.Run("target turning healthy", func(t *testing.T) {
			var up atomic.Bool
			// The backend's health check fails until up is set: a booting instance.
			gate := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/healthz" && !up.Load() {
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				}
				w.Header().Set("X-Backend", "b0")
			}))
			t.Cleanup(gate.Close)
			l := httpListener(TargetGroup{Name: "v1", Targets: []Target{{ID: "b0", Address: gate.Listener.Addr().String()}}})
			l.Hold = &Hold{Timeout: Duration(10 * time.Second)}
			lb := startLB(t, e, Config{Listeners: []Listener{l}})
			waitFor(t, 5*time.Second, "the target judged unhealthy", func() bool { return stateOf(lb, "b0") == StateUnhealthy })
			got := heldGet(t, url(lb, "/"))
			waitFor(t, 5*time.Second, "a held request", func() bool { return lb.Held("web") == 1 })
			up.Store(true)
			if r := answer(t, got, "held request"); r[0] != "200 OK" || r[1] != "b0" {
				t.Fatalf("held request: %s from %q, want 200 from b0", r[0], r[1])
			}
		})
	})
}

func TestHoldBoundAndTimeout(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		l := httpListener()
		l.Hold = &Hold{MaxQueued: 2, Timeout: Duration(time.Second)}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		start := time.Now()
		a, b := heldGet(t, url(lb, "/")), heldGet(t, url(lb, "/"))
		waitFor(t, 5*time.Second, "two held requests", func() bool { return lb.Held("web") == 2 })
		// The queue is full: the third is refused at once.
		if code, _, _ := get(t, newClient(), url(lb, "/")); code != http.StatusServiceUnavailable {
			t.Fatalf("request over the bound: %d, want 503", code)
		}
		if since := time.Since(start); since >= time.Second {
			t.Fatalf("request over the bound answered after %s: it was held", since)
		}
		for _, ch := range []<-chan [2]string{a, b} {
			if r := answer(t, ch, "held request after its timeout"); r[0] != "503 Service Unavailable" {
				t.Fatalf("held request after the timeout: %s, want 503", r[0])
			}
		}
		if since := time.Since(start); since < time.Second {
			t.Fatalf("held requests answered after %s, before the 1s timeout", since)
		}
		if n := lb.Held("web"); n != 0 {
			t.Fatalf("held after the timeout: %d", n)
		}
	})
}

func TestHoldOffRefusesAtOnce(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		lb := startLB(t, e, Config{Listeners: []Listener{httpListener()}})
		if code, _, _ := get(t, newClient(), url(lb, "/")); code != http.StatusServiceUnavailable {
			t.Fatalf("got %d, want 503", code)
		}
	})
}

func TestHoldConfig(t *testing.T) {
	l := httpListener()
	l.Hold = &Hold{}
	d := Config{Listeners: []Listener{l}}.WithDefaults()
	if h := d.Listeners[0].Hold; h.MaxQueued != 1000 || h.Timeout.D() != 30*time.Second {
		t.Fatalf("defaults: %+v", h)
	}
	l.Hold = &Hold{MaxQueued: -1}
	err := Config{Listeners: []Listener{l}}.WithDefaults().Validate()
	if err == nil || !strings.Contains(err.Error(), "hold.maxQueued") {
		t.Fatalf("negative maxQueued: %v", err)
	}
}
