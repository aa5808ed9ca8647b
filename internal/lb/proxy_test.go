package lb

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestProxyBasics(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		var seen atomic.Pointer[http.Request]
		b := newBackend(t, "b0", func(w http.ResponseWriter, r *http.Request) {
			seen.Store(r.Clone(context.Background()))
			w.Header().Set("Connection", "X-Private")
			w.Header().Set("X-Private", "secret")
			w.Header().Set("Keep-Alive", "timeout=5")
			io.WriteString(w, "hello "+r.URL.RequestURI())
		})
		lb := startLB(t, e, Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(b)})}})
		waitHealthy(t, lb, 1)
		c := newClient()

		req, _ := http.NewRequest(http.MethodGet, url(lb, "/a/b?x=1&y=%20"), nil)
		req.Host = "shop.example"
		req.Header.Set("Connection", "X-Hop")
		req.Header.Set("X-Hop", "must go")
		req.Header.Set("Proxy-Authorization", "Basic Zm9v")
		req.Header.Set("X-Forwarded-For", "203.0.113.7")
		req.Header.Set("X-Forwarded-Proto", "https")
		req.Header.Set("Te", "trailers, deflate")
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()

		r := seen.Load()
		checks := []struct {
			name      string
			got, want string
		}{
			{"status", fmt.Sprint(resp.StatusCode), "200"},
			{"body and path", string(body), "hello /a/b?x=1&y=%20"},
			{"host kept", r.Host, "shop.example"},
			{"header named in Connection stripped", r.Header.Get("X-Hop"), ""},
			{"Proxy-Authorization stripped", r.Header.Get("Proxy-Authorization"), ""},
			{"X-Forwarded-For appended", r.Header.Get("X-Forwarded-For"), "203.0.113.7, 127.0.0.1"},
			{"X-Forwarded-Proto set", r.Header.Get("X-Forwarded-Proto"), "http"},
			{"TE trailers kept alone", r.Header.Get("Te"), "trailers"},
			{"response hop header stripped", resp.Header.Get("X-Private"), ""},
			{"response Keep-Alive stripped", resp.Header.Get("Keep-Alive"), ""},
			{"response end-to-end header kept", resp.Header.Get("X-Backend"), "b0"},
		}
		for _, c := range checks {
			t.Run(c.name, func(t *testing.T) {
				if c.got != c.want {
					t.Fatalf("got %q, want %q", c.got, c.want)
				}
			})
		}

		t.Run("POST body passes", func(t *testing.T) {
			echo := newBackend(t, "echo", func(w http.ResponseWriter, r *http.Request) {
				http.NewResponseController(w).EnableFullDuplex()
				io.Copy(w, r.Body)
			})
			lb := startLB(t, e, Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(echo)})}})
			waitHealthy(t, lb, 1)
			payload := strings.Repeat("x", 100_000)
			resp, err := c.Post(url(lb, "/"), "text/plain", strings.NewReader(payload))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(got) != payload {
				t.Fatalf("echoed %d bytes, want %d", len(got), len(payload))
			}
		})
	})
}

func TestNoHealthyTarget(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		b := newBackend(t, "b0", nil)
		b.kill()
		lb := startLB(t, e, Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(b)})}})
		waitFor(t, 5*time.Second, "target unhealthy", func() bool { return stateOf(lb, "b0") == StateUnhealthy })
		if code, _, _ := get(t, newClient(), url(lb, "/")); code != http.StatusServiceUnavailable {
			t.Fatalf("got %d, want 503", code)
		}
		waitFor(t, 5*time.Second, "the 503 counted for the fleet", func() bool {
			f, _ := lb.Metrics().Fleet("web")
			return f.Requests[Class5xx] == 1
		})
	})
}

func TestIntegrationWeights(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		if testing.Short() {
			t.Skip("100,000 requests")
		}
		stable := newBackends(t, 2, nil)
		canary := newBackend(t, "canary", nil)
		lb := startLB(t, e, Config{Listeners: []Listener{httpListener(
			TargetGroup{Name: "stable", Weight: 90, Targets: targets(stable...)},
			TargetGroup{Name: "canary", Weight: 10, Targets: targets(canary)},
		)}})
		waitHealthy(t, lb, 3)
		const n, workers = 100_000, 16
		var next atomic.Int64
		var failed atomic.Int64
		var wg sync.WaitGroup
		c := newClient()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= n {
					resp, err := c.Get(url(lb, "/"))
					if err != nil {
						failed.Add(1)
						continue
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if failed.Load() != 0 {
			t.Fatalf("%d requests failed", failed.Load())
		}
		got := float64(canary.hits.Load()) / n
		if got < 0.099 || got > 0.101 {
			t.Fatalf("canary got %.4f of %d requests, want 0.10 within 1%%", got, n)
		}
		var g GroupStats
		waitFor(t, 5*time.Second, "metrics to count every canary request", func() bool {
			g, _ = lb.Metrics().Group("web", "canary")
			return g.Requests[Class2xx] == uint64(canary.hits.Load())
		})
		t.Logf("canary share %.4f, p95 %s", got, g.LatencyP95)
	})
}

func TestStickyCookie(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		lb, bs, _ := startPolicy(t, e, Policy{Type: PolicyStickyCookie, Cookie: "pin"})
		c := newClient()
		homes := map[string]bool{}
		for client := range 12 {
			resp, err := c.Get(url(lb, "/"))
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			var pin *http.Cookie
			for _, ck := range resp.Cookies() {
				if ck.Name == "pin" {
					pin = ck
				}
			}
			if pin == nil || !pin.HttpOnly {
				t.Fatalf("client %d got no HttpOnly pin cookie: %v", client, resp.Header["Set-Cookie"])
			}
			home := resp.Header.Get("X-Backend")
			homes[home] = true
			for range 20 {
				req, _ := http.NewRequest(http.MethodGet, url(lb, "/"), nil)
				req.AddCookie(pin)
				resp, err := c.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if got := resp.Header.Get("X-Backend"); got != home {
					t.Fatalf("client %d pinned to %s was sent to %s", client, home, got)
				}
				if len(resp.Cookies()) != 0 {
					t.Fatalf("cookie set again for a pinned client")
				}
			}
		}
		if len(homes) < 2 {
			t.Fatalf("12 new clients all placed on %v", homes)
		}
		// A pinned target that goes away hands its clients to another one, with a new cookie.
		code, home, _ := get(t, c, url(lb, "/"))
		if code != 200 {
			t.Fatal(code)
		}
		for _, b := range bs {
			if b.name == home {
				b.kill()
			}
		}
		waitFor(t, 5*time.Second, "pinned target down", func() bool { return stateOf(lb, home) != StateHealthy })
		for range 5 {
			if code, got, _ := get(t, c, url(lb, "/")); code != 200 || got == home {
				t.Fatalf("after %s died: %d from %s", home, code, got)
			}
		}
	})
}

func TestHeaderHashStable(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		lb, bs, l := startPolicy(t, e, Policy{Type: PolicyHeaderHash, Header: "X-Tenant"})
		c := newClient()
		home := map[string]string{}
		for i := range 30 {
			tenant := fmt.Sprintf("tenant-%d", i)
			_, home[tenant], _ = get(t, c, url(lb, "/"), "X-Tenant", tenant)
		}
		for tenant, want := range home {
			for range 5 {
				if _, got, _ := get(t, c, url(lb, "/"), "X-Tenant", tenant); got != want {
					t.Fatalf("%s moved from %s to %s", tenant, want, got)
				}
			}
		}
		// Removing b2 by Apply moves only b2's tenants.
		l.Groups = []TargetGroup{{Name: "r1", Targets: targets(bs[0], bs[1])}}
		if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
			t.Fatal(err)
		}
		for tenant, was := range home {
			_, got, _ := get(t, c, url(lb, "/"), "X-Tenant", tenant)
			if was != "b2" && got != was {
				t.Fatalf("%s moved from %s to %s though %s stayed", tenant, was, got, was)
			}
			if got == "b2" {
				t.Fatalf("%s still sent to the removed b2", tenant)
			}
		}
	})
}

// startPolicy starts a load balancer with engine e over three healthy backends, picked by policy p, and
// returns it with the backends and the listener.
func startPolicy(t *testing.T, e Engine, p Policy) (*LB, []*backend, Listener) {
	t.Helper()
	bs := newBackends(t, 3, nil)
	l := httpListener(TargetGroup{Name: "r1", Targets: targets(bs...)})
	l.Policy = p
	lb := startLB(t, e, Config{Listeners: []Listener{l}})
	waitHealthy(t, lb, 3)
	return lb, bs, l
}

// A target removed after its drain still counts for its fleet: the fleet's counters never go
// down when its instances go, which a rate over them (the autoscaler's) would read as a reset.
func TestFleetCountsKeepRemovedTargets(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		bs := newBackends(t, 2, nil)
		cfg := Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(bs...)})}}
		lb := startLB(t, e, cfg)
		waitHealthy(t, lb, 2)
		c := newClient()
		for range 10 {
			if code, _, _ := get(t, c, url(lb, "/")); code != http.StatusOK {
				t.Fatalf("got %d, want 200", code)
			}
		}
		waitFor(t, 5*time.Second, "10 requests counted", func() bool {
			f, _ := lb.Metrics().Fleet("web")
			return f.Total() == 10
		})
		cfg.Listeners[0].Groups[0].Targets = targets(bs[0])
		if err := lb.Apply(cfg); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the removed target gone after its drain", func() bool {
			g, _ := lb.Metrics().Group("web", "r1")
			return len(g.Targets) == 1
		})
		if f, _ := lb.Metrics().Fleet("web"); f.Total() != 10 || f.InFlight != 0 {
			t.Fatalf("fleet after the removal: %d requests, %d in flight; want 10 and 0", f.Total(), f.InFlight)
		}
	})
}
