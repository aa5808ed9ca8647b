package lb

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestIntegrationBackendKilledUnderLoad(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		if testing.Short() {
			t.Skip("runs load for seconds")
		}
		bs := newBackends(t, 3, nil)
		lb := startLB(t, e, Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(bs...)})}})
		waitHealthy(t, lb, 3)
		c := newClient()
		var ok, failed atomic.Int64
		var firstErr atomic.Value
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for {
					select {
					case <-stop:
						return
					default:
					}
					resp, err := c.Get(url(lb, "/"))
					if err == nil {
						_, err = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if err == nil && resp.StatusCode != 200 {
							err = fmt.Errorf("status %d", resp.StatusCode)
						}
					}
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err.Error())
						continue
					}
					ok.Add(1)
				}
			})
		}
		waitFor(t, 10*time.Second, "load to run", func() bool { return ok.Load() > 2000 })
		killed := time.Now()
		bs[1].kill()
		waitFor(t, 5*time.Second, "b1 taken out", func() bool {
			s := stateOf(lb, "b1")
			return s == StateEjected || s == StateUnhealthy
		})
		t.Logf("b1 taken out %s after it died", time.Since(killed))
		before := ok.Load()
		waitFor(t, 10*time.Second, "load to go on", func() bool { return ok.Load() > before+2000 })
		close(stop)
		wg.Wait()
		if failed.Load() != 0 {
			t.Fatalf("%d of %d GETs failed, first: %v", failed.Load(), failed.Load()+ok.Load(), firstErr.Load())
		}
		s, _ := lb.Metrics().Group("web", "r1")
		t.Logf("%d GETs, 0 failed, %d retries, %d ejections", ok.Load(), s.Retries, s.Ejections)
	})
}

func TestHangingBackendTimesOut(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		release := make(chan struct{})
		defer close(release)
		b := newBackend(t, "hang", func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
		l.Timeouts.Response = Duration(200 * time.Millisecond)
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)
		code, _, _ := get(t, newClient(), url(lb, "/"))
		if code != http.StatusGatewayTimeout {
			t.Fatalf("got %d, want 504", code)
		}
		// A timeout is not a refused connection: it counts toward ejection but does not eject at once.
		if s := stateOf(lb, "hang"); s != StateHealthy {
			t.Fatalf("after one timeout the target is %s", s)
		}
	})
}

func TestIntegrationDrainLetsRequestFinish(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		if testing.Short() {
			t.Skip("waits for a 2s request")
		}
		started := make(chan struct{}, 1)
		slow := newBackend(t, "slow", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				started <- struct{}{}
				time.Sleep(2 * time.Second)
			}
			io.WriteString(w, "done")
		})
		next := newBackend(t, "next", nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(slow)})
		l.DrainTimeout = Duration(10 * time.Second)
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)
		c := newClient()

		type result struct {
			code int
			body string
		}
		res := make(chan result, 1)
		go func() {
			code, _, body := get(t, c, url(lb, "/slow"))
			res <- result{code, body}
		}()
		<-started
		l.Groups = []TargetGroup{{Name: "r2", Targets: targets(next)}}
		if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
			t.Fatal(err)
		}
		if s := stateOf(lb, "slow"); s != StateDraining {
			t.Fatalf("removed target is %s, want draining", s)
		}
		waitHealthy(t, lb, 1)
		if _, got, _ := get(t, c, url(lb, "/")); got != "next" {
			t.Fatalf("new request went to %s, want next", got)
		}
		if r := <-res; r.code != 200 || r.body != "done" {
			t.Fatalf("draining request ended with %d %q", r.code, r.body)
		}
		waitFor(t, 5*time.Second, "drained target gone", func() bool { return stateOf(lb, "slow") == "" })
	})
}

func TestDrainDeadlineClosesConnections(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		release := make(chan struct{})
		defer close(release)
		started := make(chan struct{}, 1)
		stuck := newBackend(t, "stuck", func(w http.ResponseWriter, r *http.Request) {
			started <- struct{}{}
			<-release
		})
		other := newBackend(t, "other", nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(stuck)})
		l.DrainTimeout = Duration(100 * time.Millisecond)
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)
		res := make(chan int, 1)
		go func() {
			resp, err := newClient().Get(url(lb, "/"))
			if err != nil {
				res <- -1
				return
			}
			resp.Body.Close()
			res <- resp.StatusCode
		}()
		<-started
		l.Groups = []TargetGroup{{Name: "r2", Targets: targets(other)}}
		if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
			t.Fatal(err)
		}
		select {
		case code := <-res:
			if code != http.StatusBadGateway {
				t.Fatalf("request cut at the drain deadline got %d, want 502", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("request to a drained target outlived the drain deadline")
		}
	})
}

func TestRetries(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		// "breaker" accepts requests and drops the connection without answering.
		breaker := newBackend(t, "breaker", func(w http.ResponseWriter, r *http.Request) {
			c, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				c.Close()
			}
		})
		good := newBackend(t, "good", nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(breaker, good)})
		l.Policy.Type = PolicyRoundRobin
		l.HealthCheck.Consecutive5xx = 1000
		l.HealthCheck.EjectionTime = Duration(time.Hour)
		l.HealthCheck.MaxEjectionTime = Duration(time.Hour)
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 2)
		c := newClient()

		t.Run("idempotent GET retried on another target", func(t *testing.T) {
			for range 4 {
				if code, got, _ := get(t, c, url(lb, "/")); code != 200 || got != "good" {
					t.Fatalf("got %d from %q", code, got)
				}
			}
			if s := stateOf(lb, "breaker"); s != StateEjected {
				t.Fatalf("a target that drops connections is %s, want ejected", s)
			}
		})
		// Put the breaker back to try a POST on it.
		for _, tg := range lb.listeners["web/http"].state.Load().routes.groups[0].targets {
			tg.ejected.Store(false)
		}
		t.Run("POST not retried once sent", func(t *testing.T) {
			hits := breaker.hits.Load()
			var codes []int
			for range 2 {
				resp, err := c.Post(url(lb, "/"), "text/plain", strings.NewReader("order=1"))
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				codes = append(codes, resp.StatusCode)
				if resp.StatusCode == http.StatusBadGateway {
					break
				}
			}
			if codes[len(codes)-1] != http.StatusBadGateway || breaker.hits.Load() != hits+1 {
				t.Fatalf("codes %v, breaker hits %d; want one 502 and no second try", codes, breaker.hits.Load()-hits)
			}
		})
	})
}

func TestRetryAfterConnectFailure(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		dead := newBackend(t, "dead", nil)
		good := newBackend(t, "good", func(w http.ResponseWriter, r *http.Request) { io.Copy(w, r.Body) })
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(dead, good)})
		l.HealthCheck.Disabled = true // so the dead target is still routed
		l.Policy.Type = PolicyRoundRobin
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		dead.kill()
		c := newClient()
		// A POST that never reached a target is safe to retry, body and all.
		for i := range 4 {
			resp, err := c.Post(url(lb, "/"), "text/plain", strings.NewReader(fmt.Sprint("order=", i)))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != fmt.Sprint("order=", i) {
				t.Fatalf("POST %d: %d %q", i, resp.StatusCode, body)
			}
		}
	})
}

func TestRetryBudgetStopsAmplification(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		bs := newBackends(t, 2, nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(bs...)})
		l.HealthCheck.Disabled = true
		l.Retry = Retry{Budget: 0.001, MinPerSecond: 1}
		l.HealthCheck.EjectionTime = Duration(time.Millisecond)
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		for _, b := range bs {
			b.kill()
		}
		c := newClient()
		for range 50 {
			get(t, c, url(lb, "/"))
		}
		s, _ := lb.Metrics().Group("web", "r1")
		// The budget starts with one second of the floor (1 retry) and refills at 1/s.
		if s.Retries > 3 {
			t.Fatalf("%d retries for 50 failing requests, want the budget to stop them", s.Retries)
		}
	})
}
