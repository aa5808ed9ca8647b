package lb

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"testing"
	"time"
)

// HTTP/1.1 over TLS, as a client that chose it by ALPN or named no protocol gets it: keep-alive,
// X-Forwarded-Proto https, WebSocket upgrades. With the fast engine these connections are served
// by it, not by net/http, and its strict parser's refusals hold.
func TestTLSHTTP1(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		certFile, keyFile, pool := writeCert(t)
		b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Upgrade") == "websocket" {
				echoUpgraded(w)
				return
			}
			io.WriteString(w, r.Header.Get("X-Forwarded-Proto")+" "+r.Header.Get("X-Forwarded-For"))
		})
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
		l.TLS = &TLS{CertFile: certFile, KeyFile: keyFile}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 1)
		addr := lb.Addr("web/http").String()

		c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}},
		}}
		defer c.CloseIdleConnections()
		reused := 0
		for i := range 3 {
			ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{
				GotConn: func(info httptrace.GotConnInfo) {
					if info.Reused {
						reused++
					}
				},
			})
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+addr+"/", nil)
			resp, err := c.Do(req)
			if err != nil {
				t.Fatalf("request %d: %v", i, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.Proto != "HTTP/1.1" || string(body) != "https 127.0.0.1" {
				t.Fatalf("request %d: %s %q, want HTTP/1.1 with X-Forwarded-Proto https and the client's address", i, resp.Proto, body)
			}
		}
		if reused != 2 {
			t.Fatalf("%d of 3 requests reused the connection, want 2 (keep-alive over TLS)", reused)
		}
		if e == EngineFast {
			if n := engineConns(lb, "web/http"); n != 1 {
				t.Fatalf("the fast engine serves %d connections, want the client's idle TLS one", n)
			}
		}

		// No ALPN at all: HTTP/1.1, a WebSocket upgrade, its echo.
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, "GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nhello\n")
		br := bufio.NewReader(conn)
		resp, err := http.ReadResponse(br, nil)
		if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade over TLS: %v %v", resp, err)
		}
		if got, err := br.ReadString('\n'); err != nil || got != "HELLO\n" {
			t.Fatalf("echo over TLS: %q, %v", got, err)
		}
		conn.Close()
		if e != EngineFast {
			return // net/http takes the chunked framing and drops Content-Length (RFC 9112 section 6.3)
		}

		// The engine's strict parser holds over TLS: a request both framed by length and chunked is
		// refused, and the session ends.
		conn, err = tls.Dial("tcp", addr, &tls.Config{RootCAs: pool})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
		resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusBadRequest {
			t.Fatalf("smuggling attempt over TLS: %v %v, want 400", resp, err)
		}
		if rest, err := io.ReadAll(resp.Body); err != nil || !resp.Close {
			t.Fatalf("after the 400: %q, %v, close=%v; want the session closed", rest, err, resp.Close)
		}
	})
}

// echoUpgraded completes a WebSocket-like upgrade and echoes lines upper-cased until the client
// closes.
func echoUpgraded(w http.ResponseWriter) {
	c, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
	brw.Flush()
	for {
		line, err := brw.ReadString('\n')
		if err != nil {
			return
		}
		brw.WriteString(strings.ToUpper(line))
		brw.Flush()
	}
}

// engineConns counts the client connections the fast engine serves on the named listener.
func engineConns(lb *LB, name string) int {
	addr := lb.Addr(name).String()
	lb.mu.Lock()
	defer lb.mu.Unlock()
	for _, s := range lb.sockets {
		if s.ln.Addr().String() != addr {
			continue
		}
		l := s.handler.Load()
		l.h1mu.Lock()
		defer l.h1mu.Unlock()
		return len(l.h1conns)
	}
	return -1
}

// Connections whose client sends one request each, as every new TLS session does under
// "Connection: close" load, share pooled buffers: what one connection left unread (a second request
// cut off by its close) must never reach the next one's target.
func TestTLSConnectionsShareNoBuffers(t *testing.T) {
	certFile, keyFile, pool := writeCert(t)
	seen := make(chan string, 16)
	b := newBackend(t, "b", func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path + " " + r.Header.Get("X-Left")
		io.WriteString(w, "ok")
	})
	l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
	l.TLS = &TLS{CertFile: certFile, KeyFile: keyFile}
	lb := startLB(t, EngineFast, Config{Listeners: []Listener{l}})
	waitHealthy(t, lb, 1)
	addr := lb.Addr("web/http").String()
	get := func(raw string) {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(conn, raw)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("%q: %v %v", raw, resp, err)
		}
		io.Copy(io.Discard, resp.Body)
	}
	for i := range 5 {
		get("GET /first HTTP/1.1\r\nHost: x\r\n\r\nGET /left HTTP/1.1\r\nHost: x\r\nX-Left: " + strconv.Itoa(i))
		waitFor(t, 10*time.Second, "the connection served and gone", func() bool { return engineConns(lb, "web/http") == 0 })
		get("GET /next HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		for _, want := range []string{"/first ", "/next "} {
			if got := <-seen; got != want {
				t.Fatalf("round %d: the target got %q, want %q (nothing of the connection before)", i, got, want)
			}
		}
	}
}
