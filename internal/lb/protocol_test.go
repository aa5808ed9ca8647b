package lb

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/lb/lbtest"
)

func TestWebSocketUpgrade(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		b := newBackend(t, "ws", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") != "websocket" || !strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade") {
				http.Error(w, "not an upgrade", http.StatusBadRequest)
				return
			}
			echoUpgraded(w)
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
		echo := lbtest.EchoServer(t)
		cfg := Config{Listeners: []Listener{{
			Name: "db/tcp", Fleet: "db", Address: "127.0.0.1:0", Protocol: ProtocolTCP,
			HealthCheck: HealthCheck{Interval: Duration(100 * time.Millisecond)},
			Groups:      []TargetGroup{{Name: "r1", Targets: []Target{{ID: "echo", Address: echo}}}},
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
