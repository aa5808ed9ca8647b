package lb

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestApplyIsAtomic(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		b0, b1 := newBackend(t, "b0", nil), newBackend(t, "b1", nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(b0)})
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)
		addr := lb.Addr("web/http").String()
		before := lb.Config()

		busy, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer busy.Close()
		cases := []struct {
			name string
			cfg  Config
			want string
		}{
			{"invalid field", Config{Listeners: []Listener{{Name: "web/http", Fleet: "web", Address: addr, Protocol: "udp"}}}, "listeners[0].protocol"},
			{"address in use", Config{Listeners: []Listener{l, {Name: "other", Fleet: "web", Address: busy.Addr().String()}}}, "listeners[1] (other)"},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				err := lb.Apply(tc.cfg)
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("got %v, want an error containing %q", err, tc.want)
				}
				after, _ := json.Marshal(lb.Config())
				was, _ := json.Marshal(before)
				if string(after) != string(was) {
					t.Fatalf("a rejected Apply changed the config:\n%s\n%s", was, after)
				}
				if lb.Addr("other") != nil {
					t.Fatal("a rejected Apply left a listener behind")
				}
				if code, got, _ := get(t, newClient(), url(lb, "/")); code != 200 || got != "b0" {
					t.Fatalf("after a rejected Apply: %d from %s", code, got)
				}
			})
		}

		t.Run("socket and client connections survive an Apply", func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			ask := func() string {
				io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					t.Logf("status %d: %s", resp.StatusCode, body)
				}
				return resp.Header.Get("X-Backend")
			}
			if got := ask(); got != "b0" {
				t.Fatalf("got %s", got)
			}
			next := l
			next.Groups = []TargetGroup{{Name: "r2", Targets: targets(b1)}}
			next.Policy.Type = PolicyRoundRobin
			if err := lb.Apply(Config{Listeners: []Listener{next}}); err != nil {
				t.Fatal(err)
			}
			if got := lb.Addr("web/http").String(); got != addr {
				t.Fatalf("listener moved from %s to %s", addr, got)
			}
			waitFor(t, 5*time.Second, "b1 healthy", func() bool { return stateOf(lb, "b1") == StateHealthy })
			if got := ask(); got != "b1" {
				t.Fatalf("same keep-alive connection after Apply went to %s, want b1", got)
			}
		})

		t.Run("server settings change keeps the socket", func(t *testing.T) {
			next := l
			next.Groups = []TargetGroup{{Name: "r2", Targets: targets(b1)}}
			next.Timeouts.Idle = Duration(5 * time.Second) // rebuilds the http.Server behind the socket
			if err := lb.Apply(Config{Listeners: []Listener{next}}); err != nil {
				t.Fatal(err)
			}
			if got := lb.Addr("web/http").String(); got != addr {
				t.Fatalf("listener moved from %s to %s", addr, got)
			}
			for range 20 {
				if code, got, _ := get(t, newClient(), url(lb, "/")); code != 200 || got != "b1" {
					t.Fatalf("got %d from %s", code, got)
				}
			}
		})
	})
}

func TestRemovedListenerStops(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		b := newBackend(t, "b", nil)
		a := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
		other := a
		other.Name = "web/other"
		lb := startLB(t, e, Config{Listeners: []Listener{a, other}})
		waitHealthy(t, lb, 2)
		gone := lb.Addr("web/other").String()
		if err := lb.Apply(Config{Listeners: []Listener{a}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "removed listener closed", func() bool {
			c, err := net.Dial("tcp", gone)
			if err == nil {
				c.Close()
			}
			return err != nil
		})
		if code, _, _ := get(t, newClient(), url(lb, "/")); code != 200 {
			t.Fatalf("remaining listener answered %d", code)
		}
	})
}

func TestMetricsAndPrometheus(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		ok := newBackend(t, "ok", nil)
		bad := newBackend(t, "bad", func(w http.ResponseWriter, r *http.Request) { http.Error(w, "no", http.StatusInternalServerError) })
		l := httpListener(
			TargetGroup{Name: "stable", Weight: 1, Targets: targets(ok)},
			TargetGroup{Name: "canary", Weight: 1, Targets: targets(bad)},
		)
		l.HealthCheck.Consecutive5xx = 100
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 2)
		c := newClient()
		before := lb.Metrics()
		for range 10 {
			get(t, c, url(lb, "/"))
		}
		// Counters are updated just after the client has its answer.
		waitFor(t, 5*time.Second, "10 requests counted", func() bool {
			f, _ := lb.Metrics().Fleet("web")
			return f.Total() == 10
		})
		snap := lb.Metrics()
		stable, _ := snap.Group("web", "stable")
		canary, _ := snap.Group("web", "canary")
		prev, _ := before.Group("web", "canary")
		window := canary.Sub(prev.Stats)
		if stable.Requests[Class2xx] != 5 || canary.Requests[Class5xx] != 5 || window.Total() != 5 {
			t.Fatalf("stable %v canary %v window %v", stable.Requests, canary.Requests, window.Requests)
		}
		if canary.LatencyP95 <= 0 || canary.Targets[0].State != StateHealthy {
			t.Fatalf("canary p95 %s state %s", canary.LatencyP95, canary.Targets[0].State)
		}
		f, _ := snap.Fleet("web")
		if f.Total() != 10 {
			t.Fatalf("fleet total %d, want 10", f.Total())
		}

		rec := httptest.NewRecorder()
		lb.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
		body := rec.Body.String()
		for _, want := range []string{
			`herd_lb_requests_total{class="5xx",fleet="web",group="canary",listener="web/http",target="bad"} 5`,
			`herd_lb_request_duration_seconds_count{fleet="web",group="stable",listener="web/http",target="ok"} 5`,
			`herd_lb_target_healthy{fleet="web",group="stable",listener="web/http",target="ok"} 1`,
			`herd_lb_in_flight_requests`, `herd_lb_ejections_total`, `herd_lb_retries_total`, `go_goroutines`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
	})
}

func TestQuantile(t *testing.T) {
	s := Stats{Latency: make([]uint64, len(LatencyBuckets)+1)}
	if s.Quantile(0.95) != 0 {
		t.Fatal("empty histogram has a quantile")
	}
	var c counters
	for range 95 {
		c.observe(Class2xx, 800*time.Microsecond) // bucket (0.5ms, 1ms]
	}
	for range 5 {
		c.observe(Class2xx, 3*time.Second) // bucket (2.5s, 5s]
	}
	s = c.snapshot()
	if q := s.Quantile(0.95); q <= 500*time.Microsecond || q > time.Millisecond {
		t.Fatalf("p95 = %s, want within (0.5ms, 1ms]", q)
	}
	if q := s.Quantile(0.99); q <= 2500*time.Millisecond || q > 5*time.Second {
		t.Fatalf("p99 = %s, want within (2.5s, 5s]", q)
	}
}

func TestRetryBudget(t *testing.T) {
	b := newRetryBudget()
	b.configure(Retry{Budget: 0.5, MinPerSecond: 0})
	if b.take() {
		t.Fatal("a budget with no requests and no floor allowed a retry")
	}
	for range 10 {
		b.deposit()
	}
	n := 0
	for b.take() {
		n++
	}
	if n != 5 {
		t.Fatalf("10 requests at ratio 0.5 allowed %d retries, want 5", n)
	}
}

func TestAdminAPI(t *testing.T) {
	b := newBackend(t, "b", nil)
	lb := startLB(t, EngineFast, Config{})
	h, err := NewAdminHandler(lb, "s3cret", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewAdminHandler(lb, " ", nil); err == nil {
		t.Fatal("an empty token was accepted")
	}
	do := func(method, path, token, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	for _, tc := range []struct{ name, token string }{{"missing", ""}, {"wrong", "s3cre"}, {"longer", "s3cret!"}} {
		t.Run("token "+tc.name, func(t *testing.T) {
			for _, path := range []string{"/config", "/health", "/metrics", "/nope"} {
				rec := do(http.MethodGet, path, tc.token, "")
				if rec.Code != http.StatusUnauthorized || rec.Body.Len() != 0 {
					t.Fatalf("%s: %d %q, want a bare 401", path, rec.Code, rec.Body.String())
				}
			}
		})
	}
	cfg := `{"listeners":[{"name":"web/http","fleet":"web","address":"127.0.0.1:0",
	  "healthCheck":{"path":"/healthz","interval":"100ms"},
	  "groups":[{"name":"r1","targets":[{"id":"b","address":"` + b.addr() + `"}]}]}]}`
	t.Run("PUT applies", func(t *testing.T) {
		rec := do(http.MethodPut, "/config", "s3cret", cfg)
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"drainTimeout": "30s"`) {
			t.Fatalf("%d %s", rec.Code, rec.Body.String())
		}
		waitHealthy(t, lb, 1)
		if code, _, _ := get(t, newClient(), url(lb, "/")); code != 200 {
			t.Fatalf("proxy after PUT answered %d", code)
		}
	})
	t.Run("PUT rejects bad config and names the field", func(t *testing.T) {
		for _, body := range []string{
			strings.Replace(cfg, `"fleet"`, `"flet"`, 1),
			strings.Replace(cfg, `"100ms"`, `"soon"`, 1),
			strings.Replace(cfg, `"name":"r1"`, `"name":""`, 1),
		} {
			rec := do(http.MethodPut, "/config", "s3cret", body)
			if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), "error") {
				t.Fatalf("%d %s", rec.Code, rec.Body.String())
			}
		}
		if got := do(http.MethodGet, "/config", "s3cret", ""); !strings.Contains(got.Body.String(), `"name": "r1"`) {
			t.Fatalf("config changed by a rejected PUT: %s", got.Body.String())
		}
	})
	t.Run("health and stats", func(t *testing.T) {
		var health []TargetHealth
		rec := do(http.MethodGet, "/health", "s3cret", "")
		if err := json.Unmarshal(rec.Body.Bytes(), &health); err != nil || len(health) != 1 || health[0].State != StateHealthy {
			t.Fatalf("%v %s", err, rec.Body.String())
		}
		var snap Snapshot
		rec = do(http.MethodGet, "/stats", "s3cret", "")
		if err := json.Unmarshal(rec.Body.Bytes(), &snap); err != nil || len(snap.Fleets) != 1 {
			t.Fatalf("%v %s", err, rec.Body.String())
		}
		// The client reads the same counters, down to the target's.
		srv := httptest.NewServer(h)
		defer srv.Close()
		// The proxied request is counted once the proxy has finished it, which may be just
		// after its client got the answer.
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, err := (&AdminClient{URL: srv.URL, Token: "s3cret"}).Stats()
			if err != nil {
				t.Fatal(err)
			}
			g, ok := got.Group("web", "r1")
			if ok && len(g.Targets) == 1 && g.Targets[0].ID == "b" && g.Total() != 0 && g.Targets[0].Total() == g.Total() {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("AdminClient.Stats: group %+v, %v; want r1 with target b and the proxied request counted", g, ok)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := (&AdminClient{URL: srv.URL, Token: "wrong"}).Stats(); err == nil {
			t.Fatal("AdminClient.Stats with a wrong token succeeded")
		}
	})
}

func TestStartStop(t *testing.T) {
	lb := New(Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := lb.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lb.Apply(Config{}); err != ErrStopped {
		t.Fatalf("Apply after stop: %v", err)
	}
	if err := lb.Start(context.Background()); err != ErrStopped {
		t.Fatalf("Start after stop: %v", err)
	}
}
