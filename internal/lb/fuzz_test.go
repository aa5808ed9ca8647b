package lb

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// FuzzH1 feeds arbitrary bytes, as one client connection, to the HTTP/1.x engine. It must never panic,
// must answer only with well-formed responses, must never leave the target waiting for a request's end,
// and whatever reaches the target must carry no hop-by-hop header and end its X-Forwarded-For with the
// client's address.
// Run: go test ./internal/lb -run '^$' -fuzz FuzzH1 -fuzztime 2m
func FuzzH1(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}
	f.Add([]byte("GET /a HTTP/1.1\r\nHost: a\r\n\r\nGET /b HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=1\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\nHEAD / HTTP/1.0\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx"))
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))

	l, violation := fuzzListener(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		var out bytes.Buffer
		conn := &fakeConn{in: bytes.NewReader(raw), out: &out}
		cc := &clientConn{Conn: conn, sock: l.sock}
		l.serveH1(cc, cc)
		if v, ok := violation.Load("any"); ok {
			violation.Delete("any")
			t.Fatalf("%v\ninput: %q", v, raw)
		}
		// The target answers at once, so a 504 means it waited for bytes the engine never sent: the
		// engine and the target disagreed on where a request ends.
		if bytes.Contains(out.Bytes(), []byte(" 504 Gateway Timeout")) {
			t.Fatalf("target timed out: request framing out of step\ninput: %q", raw)
		}
		// Every answer must parse; the first is enough to check the framing the engine wrote.
		if out.Len() > 0 {
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out.Bytes())), nil)
			if err != nil || resp.StatusCode < 100 || resp.StatusCode > 599 {
				t.Fatalf("unparsable answer %q: %v\ninput: %q", out.Bytes(), err, raw)
			}
		}
	})
}

// fuzzListener is an HTTP listener, applied but not started, in front of a target that checks what
// reaches it.
func fuzzListener(f *testing.F) (*listener, *sync.Map) {
	var violation sync.Map
	b := newBackend(f, "b", func(w http.ResponseWriter, r *http.Request) {
		if v := forwardViolation(r, "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Trailer", "Expect"); v != "" {
			violation.Store("any", v)
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	cfg := Listener{
		Name: "web/http", Fleet: "web", Address: "127.0.0.1:0",
		HealthCheck: HealthCheck{Disabled: true},
		Policy:      Policy{Type: PolicyStickyCookie},
		Limits:      Limits{MaxBodyBytes: 1 << 16},
		Timeouts:    Timeouts{Response: Duration(2 * time.Second)},
		Groups:      []TargetGroup{{Name: "r1", Targets: targets(b)}},
	}
	lb := New(Options{Logger: slogTo(io.Discard)})
	if err := lb.Apply(Config{Listeners: []Listener{cfg}}); err != nil {
		f.Fatal(err)
	}
	l := lb.listeners["web/http"]
	// The listener is not started: stand in for its http.Server, which takes HTTP/2 connections.
	go func() {
		for {
			c, err := l.queue.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	f.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		lb.Start(ctx)
	})
	return l, &violation
}

// forwardViolation tells what is wrong with a request as it reached the target, or "": one of the
// hop-by-hop headers hop came through (Connection is allowed with an upgrade), or X-Forwarded-For does
// not end with the fuzzed client's address.
func forwardViolation(r *http.Request, hop ...string) string {
	for _, h := range hop {
		if _, ok := r.Header[h]; ok && !(h == "Connection" && r.Header.Get("Upgrade") != "") {
			return "hop-by-hop header reached the target: " + h
		}
	}
	if xff := r.Header.Get("X-Forwarded-For"); !strings.HasSuffix(xff, "192.0.2.1") {
		return "X-Forwarded-For does not end with the client: " + xff
	}
	return ""
}

// fakeConn is a client connection that sends in and records what it is sent.
type fakeConn struct {
	in  *bytes.Reader
	out *bytes.Buffer
}

func (c *fakeConn) Read(p []byte) (int, error)       { return c.in.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 80} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 4242} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

var fuzzSeeds = []string{
	"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET /x?y=1 HTTP/1.0\r\n\r\n",
	"POST /p HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc",
	"POST /p HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\nX-T: 1\r\n\r\n",
	"PUT /p HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nhi",
	"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-A, close\r\nX-A: 1\r\nKeep-Alive: 5\r\n\r\n",
	"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 1.2.3.4, 5.6.7.8\r\nTe: trailers\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: a\r\nCookie: herd-lb=zzz; other=1\r\nX-Tenant: t1\r\n\r\n",
	"OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n",
	"GET http://other.example/abs HTTP/1.1\r\nHost: a\r\n\r\n",
	"CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n",
	"GET /%zz HTTP/1.1\r\nHost: a\r\n\r\n",
	"HEAD / HTTP/1.1\r\nHost: a\r\nConnection: Transfer-Encoding, Host, Content-Length\r\n\r\n",
}

// FuzzServeHTTP feeds arbitrary requests, as net/http's parser accepts them, to the net/http path's
// handler (HTTP/2 and TLS clients). The
// handler must never panic, must answer with a valid status, and whatever reaches the target must carry
// no hop-by-hop header and end its X-Forwarded-For with the client's address.
// Run: go test ./internal/lb -run '^$' -fuzz FuzzServeHTTP -fuzztime 2m
func FuzzServeHTTP(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s))
	}

	var violation sync.Map // a backend-side invariant broken, by request
	b := newBackend(f, "b", func(w http.ResponseWriter, r *http.Request) {
		// No Transfer-Encoding here: net/http moves it out of r.Header, so it could never be seen.
		if v := forwardViolation(r, "Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authorization", "Trailer"); v != "" {
			violation.Store(r.Header.Get("X-Fuzz-ID"), v)
		}
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	})
	l := Listener{
		Name: "web/http", Fleet: "web", Address: "127.0.0.1:0",
		HealthCheck: HealthCheck{Disabled: true},
		Policy:      Policy{Type: PolicyStickyCookie},
		Limits:      Limits{MaxBodyBytes: 1 << 16},
		Groups:      []TargetGroup{{Name: "r1", Targets: targets(b)}},
	}
	lb := New(Options{Logger: slogTo(io.Discard)})
	if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		lb.Start(ctx)
	})
	handler := lb.listeners["web/http"]

	var seq sync.Mutex
	n := 0
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return // net/http's server answers 400 itself
		}
		seq.Lock()
		n++
		id := fmt.Sprint(n)
		seq.Unlock()
		req.Header.Set("X-Fuzz-ID", id)
		req.RemoteAddr = "192.0.2.1:4242"
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, req.WithContext(context.Background()))
		if rec.Code < 100 || rec.Code > 599 {
			t.Fatalf("status %d", rec.Code)
		}
		if v, ok := violation.Load(id); ok {
			t.Fatalf("%v\nrequest: %q", v, raw)
		}
	})
}
