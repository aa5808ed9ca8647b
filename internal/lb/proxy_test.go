package lb

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
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
		bs := newBackends(t, 3, nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(bs...)})
		l.Policy = Policy{Type: PolicyStickyCookie, Cookie: "pin"}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 3)
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
		bs := newBackends(t, 3, nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(bs...)})
		l.Policy = Policy{Type: PolicyHeaderHash, Header: "X-Tenant"}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 3)
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

func TestWebSocketUpgrade(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		b := newBackend(t, "ws", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") != "websocket" || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
				http.Error(w, "not an upgrade", http.StatusBadRequest)
				return
			}
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer c.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
			brw.Flush()
			// Echo lines, upper-cased, until the client closes.
			for {
				line, err := brw.ReadString('\n')
				if err != nil {
					return
				}
				brw.WriteString(strings.ToUpper(line))
				brw.Flush()
			}
		})
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
		l.Timeouts.Write = Duration(300 * time.Millisecond) // upgraded connections must outlive it
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)

		conn, err := net.Dial("tcp", lb.Addr("web/http").String())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		io.WriteString(conn, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\nfirst\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != "websocket" {
			t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
		}
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		for _, msg := range []string{"first", "second", "third"} {
			if msg != "first" {
				io.WriteString(conn, msg+"\n")
			}
			if msg == "third" {
				time.Sleep(400 * time.Millisecond) // past the write timeout of plain requests
			}
			got, err := br.ReadString('\n')
			if err != nil || got != strings.ToUpper(msg)+"\n" {
				t.Fatalf("echo of %q: %q, %v", msg, got, err)
			}
		}
		if h := lb.Health(); h[0].InFlight != 1 {
			t.Fatalf("an open WebSocket counts %d in flight, want 1", h[0].InFlight)
		}
		conn.Close()
		waitFor(t, 5*time.Second, "WebSocket to end", func() bool { return lb.Health()[0].InFlight == 0 })
	})
}

func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

func TestH2C(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		t.Run("h2c client, HTTP/1.1 backend", func(t *testing.T) {
			var proto atomic.Value
			b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
				proto.Store(r.Proto)
				io.WriteString(w, "ok")
			})
			lb := startLB(t, e, Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(b)})}})
			waitHealthy(t, lb, 1)
			resp, err := h2cClient().Get(url(lb, "/"))
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.Proto != "HTTP/2.0" || string(body) != "ok" || proto.Load() != "HTTP/1.1" {
				t.Fatalf("client %s %q, backend %v", resp.Proto, body, proto.Load())
			}
		})
		t.Run("h2c end to end with trailers", func(t *testing.T) {
			srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.ProtoMajor != 2 {
					http.Error(w, "want HTTP/2, got "+r.Proto, http.StatusBadRequest)
					return
				}
				w.Header().Set("Trailer", "Grpc-Status")
				w.Header().Set("X-Backend", "grpc")
				io.Copy(w, r.Body)
				w.Header().Set("Grpc-Status", "0")
			})}
			srv.Protocols.SetUnencryptedHTTP2(true)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln)
			t.Cleanup(func() { srv.Close() })
			l := httpListener(TargetGroup{Name: "r1", Targets: []Target{{ID: "grpc", Address: ln.Addr().String()}}})
			l.BackendProtocol = BackendH2C
			l.HealthCheck.Path = ""
			lb := startLB(t, e, Config{Listeners: []Listener{l}})
			waitHealthy(t, lb, 1)
			req, _ := http.NewRequest(http.MethodPost, url(lb, "/svc/Method"), strings.NewReader("payload"))
			req.Header.Set("Te", "trailers")
			resp, err := h2cClient().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 || string(body) != "payload" || resp.Trailer.Get("Grpc-Status") != "0" {
				t.Fatalf("got %d %q trailers %v", resp.StatusCode, body, resp.Trailer)
			}
		})
	})
}

func TestSlowlorisCutOff(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		b := newBackend(t, "b", nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
		l.Timeouts.ReadHeader = Duration(300 * time.Millisecond)
		l.Limits.MaxConnections = 40
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)
		addr := lb.Addr("web/http").String()

		// Clients that never finish their headers, trickling a byte now and then, hold every connection slot.
		var slow []net.Conn
		for range 40 {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Slow: ")
			slow = append(slow, c)
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					for _, c := range slow {
						c.Write([]byte("a"))
					}
				}
			}
		}()
		// Each is cut off when its header deadline passes, however steadily it trickles.
		for i, c := range slow {
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err := io.Copy(io.Discard, c)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("slow client %d still connected after 5s", i)
			}
		}
		// And a normal client gets through.
		if code, _, _ := get(t, newClient(), url(lb, "/")); code != 200 {
			t.Fatalf("normal client got %d", code)
		}
	})
}

func TestBadRequests(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		var logs logBuffer
		b := newBackend(t, "b", nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
		l.Limits.MaxHeaders = 10
		l.Limits.MaxHeaderBytes = 4096
		l.Limits.MaxBodyBytes = 1000
		lb := startLBWith(t, e, Config{Listeners: []Listener{l}}, slogTo(&logs))
		waitHealthy(t, lb, 1)
		addr := lb.Addr("web/http").String()
		manyHeaders := "GET / HTTP/1.1\r\nHost: x\r\n"
		for i := range 11 {
			manyHeaders += fmt.Sprintf("X-H%d: v\r\n", i)
		}
		cases := []struct {
			name, raw, want string
			netHTTP         string // what the net/http engine answers, where it differs
		}{
			{"garbage", "\x00\x01 nonsense\r\n\r\n", "HTTP/1.1 400", ""},
			{"bad header line", "GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", "HTTP/1.1 400", ""},
			{"no host", "GET / HTTP/1.1\r\n\r\n", "HTTP/1.1 400", ""},
			{"huge header", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 20000) + "\r\n\r\n", "HTTP/1.1 431", ""},
			{"too many headers", manyHeaders + "\r\n", "HTTP/1.1 431", ""},
			{"body too large", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + strings.Repeat("a", 5000), "HTTP/1.1 413", ""},
			{"chunked body too large", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1388\r\n" + strings.Repeat("a", 5000) + "\r\n0\r\n\r\n", "HTTP/1.1 413", ""},
			// net/http forwards such a request with the Content-Length removed, as RFC 9112 section 6.3
			// allows an intermediary to: the target sees one framing either way.
			{"smuggling: CL and TE", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "HTTP/1.1 400", "HTTP/1.1 200"},
			{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "HTTP/1.1 405", ""},
			{"fine", "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 200", ""},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				want := tc.want
				if e == EngineNetHTTP && tc.netHTTP != "" {
					want = tc.netHTTP
				}
				if got := rawRequest(t, addr, tc.raw); !strings.HasPrefix(got, want) {
					t.Fatalf("got %.60q, want %q", got, want)
				}
			})
		}
		waitFor(t, 2*time.Second, "bad requests logged", func() bool {
			return strings.Count(logs.String(), `msg="bad request"`) >= 6
		})
		malformed := "malformed request line"
		if e == EngineNetHTTP {
			malformed = "400 Bad Request"
		}
		if !strings.Contains(logs.String(), malformed) || !strings.Contains(logs.String(), "too many header fields") {
			t.Fatalf("log lacks the reasons:\n%s", logs.String())
		}
	})
}

func TestTCPListener(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		echo, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer echo.Close()
		go func() {
			for {
				c, err := echo.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					io.Copy(c, c) // echo until the client half-closes, then close
				}()
			}
		}()
		cfg := Config{Listeners: []Listener{{
			Name: "db/tcp", Fleet: "db", Address: "127.0.0.1:0", Protocol: ProtocolTCP,
			HealthCheck: HealthCheck{Interval: Duration(100 * time.Millisecond)},
			Groups:      []TargetGroup{{Name: "r1", Targets: []Target{{ID: "echo", Address: echo.Addr().String()}}}},
		}}}
		lb := startLB(t, e, cfg)
		waitHealthy(t, lb, 1)
		c, err := net.Dial("tcp", lb.Addr("db/tcp").String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "ping over tcp")
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, err := io.ReadAll(c)
		if err != nil || string(got) != "ping over tcp" {
			t.Fatalf("got %q, %v", got, err)
		}
		waitFor(t, 5*time.Second, "the connection counted", func() bool {
			s, _ := lb.Metrics().Fleet("db")
			return s.Requests[Class2xx] == 1
		})
	})
}

func TestTLSTermination(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		certFile, keyFile, pool := writeCert(t)
		b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
			io.WriteString(w, r.Header.Get("X-Forwarded-Proto"))
		})
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
		l.TLS = &TLS{CertFile: certFile, KeyFile: keyFile}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
		c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
		resp, err := c.Get("https://" + lb.Addr("web/http").String() + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Proto != "HTTP/2.0" || string(body) != "https" {
			t.Fatalf("got %s %q, want HTTP/2.0 over TLS and X-Forwarded-Proto https", resp.Proto, body)
		}
		// A missing certificate is an error naming the field, and changes nothing.
		l.TLS = &TLS{CertFile: certFile + ".missing", KeyFile: keyFile}
		if err := lb.Apply(Config{Listeners: []Listener{l}}); err == nil || !strings.Contains(err.Error(), "listeners[0].tls") {
			t.Fatalf("Apply with a missing cert: %v", err)
		}
		if resp, err := c.Get("https://" + lb.Addr("web/http").String() + "/"); err != nil {
			t.Fatalf("after a rejected Apply: %v", err)
		} else {
			resp.Body.Close()
		}
	})
}
