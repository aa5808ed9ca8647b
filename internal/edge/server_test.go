package edge

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// conn is a raw client connection to the rig's edge, for what an http.Client does not do:
// pipelining, hostile bytes.
type conn struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func (g *rig) dial() *conn {
	g.t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
	if err != nil {
		g.t.Fatal(err)
	}
	g.t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return &conn{t: g.t, c: c, br: bufio.NewReader(c)}
}

func (c *conn) send(raw string) {
	c.t.Helper()
	if _, err := io.WriteString(c.c, raw); err != nil {
		c.t.Fatal(err)
	}
}

// read reads one answer to a request of method.
func (c *conn) read(method string) reply {
	c.t.Helper()
	resp, err := http.ReadResponse(c.br, &http.Request{Method: method})
	if err != nil {
		c.t.Fatalf("reading an answer: %v", err)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		c.t.Fatalf("reading a body: %v", err)
	}
	if resp.Close {
		resp.Header.Set("Connection", "close") // net/http takes the field out as it reads it
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// closed reports whether the edge closed the connection, with nothing more sent.
func (c *conn) closed() bool {
	b, err := c.br.ReadByte()
	return err == io.EOF || (err != nil && b == 0 && !isTimeout(err))
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func get(path string) string { return "GET " + path + " HTTP/1.1\r\nHost: edge.test\r\n\r\n" }

func check(t *testing.T, r reply, status int, body, xcache string) {
	t.Helper()
	if r.status != status || r.body != body || r.header.Get("X-Cache") != xcache {
		t.Fatalf("got %d %q X-Cache=%q, want %d %q X-Cache=%q", r.status, r.body, r.header.Get("X-Cache"), status, body, xcache)
	}
}

// A keep-alive connection carries a miss and then hits, each answered whole, with the fields of a
// stored response, its Age and a Date.
func TestEngineKeepAlive(t *testing.T) {
	g := newRig(t, fixed(200, "cached body", "Cache-Control", "max-age=60", "Content-Type", "text/plain"), nil)
	c := g.dial()
	c.send(get("/a"))
	check(t, c.read("GET"), 200, "cached body", "Miss")
	for range 3 {
		c.send(get("/a"))
		r := c.read("GET")
		check(t, r, 200, "cached body", "Hit")
		if r.header.Get("Age") == "" || r.header.Get("Date") == "" || r.header.Get("Content-Type") != "text/plain" ||
			r.header.Get("Accept-Ranges") != "bytes" || r.header.Get("Cache-Control") != "max-age=60" {
			t.Fatalf("a hit's fields: %v", r.header)
		}
	}
	if n := g.hits.Load(); n != 1 {
		t.Fatalf("the origin was asked %d times, want 1", n)
	}
}

// Pipelined requests, hits, misses and HEADs mixed, are answered in order on one connection.
func TestEnginePipelining(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "body of "+r.URL.Path+strings.Repeat(".", 3000)) // large: sent by reference
	}, nil)
	c := g.dial()
	c.send(get("/warm"))
	c.read("GET")
	c.send(get("/warm") + get("/cold") + "HEAD /warm HTTP/1.1\r\nHost: edge.test\r\n\r\n" + get("/warm") + get("/cold"))
	pad := strings.Repeat(".", 3000)
	check(t, c.read("GET"), 200, "body of /warm"+pad, "Hit")
	check(t, c.read("GET"), 200, "body of /cold"+pad, "Miss")
	head := c.read("HEAD")
	check(t, head, 200, "", "Hit")
	if head.header.Get("Content-Length") != "3013" {
		t.Fatalf("HEAD's Content-Length %q, want 3013", head.header.Get("Content-Length"))
	}
	check(t, c.read("GET"), 200, "body of /warm"+pad, "Hit")
	check(t, c.read("GET"), 200, "body of /cold"+pad, "Hit")
}

// A request the engine hands to net/http (a POST with a body) is answered on its connection, and
// the connection carries requests on after it; a conditional GET goes through the handler and is
// answered 304 between hits.
func TestEngineHandsOverMidConnection(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			b, _ := io.ReadAll(r.Body)
			io.WriteString(w, "posted "+string(b))
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"v1"`)
		io.WriteString(w, "doc")
	}, nil)
	c := g.dial()
	c.send(get("/doc"))
	check(t, c.read("GET"), 200, "doc", "Miss")
	c.send("GET /doc HTTP/1.1\r\nHost: edge.test\r\nIf-None-Match: \"v1\"\r\n\r\n")
	if r := c.read("GET"); r.status != http.StatusNotModified || r.header.Get("X-Cache") != "Hit" {
		t.Fatalf("conditional GET: %d %v", r.status, r.header)
	}
	c.send(get("/doc"))
	check(t, c.read("GET"), 200, "doc", "Hit")
	c.send("POST /form HTTP/1.1\r\nHost: edge.test\r\nContent-Length: 5\r\n\r\nhello")
	check(t, c.read("POST"), 200, "posted hello", "Pass")
	c.send(get("/doc"))
	check(t, c.read("GET"), 200, "doc", "Hit")
	if n := g.hits.Load(); n != 2 {
		t.Fatalf("the origin was asked %d times, want 2 (the miss and the POST)", n)
	}
}

// A client asking to close gets its answer, Connection: close, and the end of the connection; an
// HTTP/1.0 client without keep-alive too.
func TestEngineConnectionClose(t *testing.T) {
	g := newRig(t, fixed(200, "x", "Cache-Control", "max-age=60"), nil)
	warm := g.dial()
	warm.send(get("/a"))
	check(t, warm.read("GET"), 200, "x", "Miss")
	for _, raw := range []string{
		"GET /a HTTP/1.1\r\nHost: edge.test\r\nConnection: close\r\n\r\n",
		"GET /a HTTP/1.0\r\nHost: edge.test\r\n\r\n",
	} {
		c := g.dial()
		c.send(raw + get("/a"))
		r := c.read("GET")
		check(t, r, 200, "x", "Hit")
		if r.header.Get("Connection") != "close" || !c.closed() {
			t.Fatalf("%q: the connection was kept (Connection %q)", raw, r.header.Get("Connection"))
		}
	}
	c := g.dial()
	c.send("GET /a HTTP/1.0\r\nHost: edge.test\r\nConnection: keep-alive\r\n\r\n")
	if r := c.read("GET"); r.header.Get("Connection") != "keep-alive" {
		t.Fatalf("HTTP/1.0 keep-alive answered with Connection %q", r.header.Get("Connection"))
	}
	c.send(get("/a"))
	check(t, c.read("GET"), 200, "x", "Hit")
}

// Hostile requests are refused with the load balancer's answers and the connection closed, so that
// nothing sent after them on it reaches the origin.
func TestEngineRefusesHostileRequests(t *testing.T) {
	g := newRig(t, fixed(200, "x", "Cache-Control", "max-age=60"), nil)
	for _, tc := range []struct{ name, raw, want string }{
		{"oversized head", "GET /a HTTP/1.1\r\nHost: edge.test\r\nX-Big: " + strings.Repeat("a", 70<<10) + "\r\n\r\n", "431"},
		{"both framings", "GET /a HTTP/1.1\r\nHost: edge.test\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", "400"},
		{"two lengths", "GET /a HTTP/1.1\r\nHost: edge.test\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "400"},
		{"line folding", "GET /a HTTP/1.1\r\nHost: edge.test\r\nX-A: 1\r\n folded\r\n\r\n", "400"},
		{"bad target", "GET /a%zz HTTP/1.1\r\nHost: edge.test\r\n\r\n", "400"},
		{"bad host", "GET /a HTTP/1.1\r\nHost: a b\r\n\r\n", "400"},
		{"no host", "GET /a HTTP/1.1\r\n\r\n", "400"},
		{"HTTP/2.0 line", "GET /a HTTP/2.0\r\nHost: edge.test\r\n\r\n", "505"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := g.dial()
			go io.WriteString(c.c, tc.raw+get("/after"))
			line, _ := c.br.ReadString('\n')
			if !strings.HasPrefix(line, "HTTP/1.1 "+tc.want+" ") {
				t.Fatalf("got %q, want %s", line, tc.want)
			}
			io.Copy(io.Discard, c.br)
		})
	}
	if n := g.hits.Load(); n != 0 {
		t.Fatalf("the origin was asked %d times", n)
	}
}

// A hit answered by the engine is the answer net/http's server gives through the handler, Date and
// Age aside.
func TestEngineHitMatchesNetHTTP(t *testing.T) {
	for _, c := range []struct {
		body string
		hdr  []string
	}{
		{"<html>hello</html>", []string{"Cache-Control", "max-age=60", "Content-Type", "text/html", "ETag", `"e"`, "Set-Cookie", "a=1", "Set-Cookie", "b=2"}},
		{"<html>hello</html>", []string{"Cache-Control", "max-age=60"}},                                              // no Content-Type: sniffed
		{strings.Repeat("<p>hello</p>", 420), []string{"Cache-Control", "max-age=60", "X-Many", "a", "X-Many", "b"}}, // stored in two parts
	} {
		g := newRig(t, fixed(200, c.body, c.hdr...), nil)
		std := httptest.NewServer(g.edge)
		t.Cleanup(std.Close)
		g.fetch(std.URL, "GET")
		for _, method := range []string{"GET", "HEAD"} {
			want := g.fetch(std.URL, method)
			got := g.fetch(g.srv.URL, method)
			for _, r := range []reply{want, got} {
				r.header.Del("Date")
				r.header.Del("Age")
			}
			if got.status != want.status || got.body != want.body || !equalHeader(got.header, want.header) {
				t.Fatalf("%s through the engine: %d %q %v\nthrough net/http: %d %q %v", method, got.status, got.body, got.header, want.status, want.body, want.header)
			}
		}
	}
}

func (g *rig) fetch(base, method string) reply {
	g.t.Helper()
	req, _ := http.NewRequest(method, base+"/a", nil)
	req.Host = "edge.test"
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, vs := range a {
		if strings.Join(vs, "\n") != strings.Join(b[k], "\n") {
			return false
		}
	}
	return true
}

// Over TLS, a client that chooses HTTP/1.1 is served by the engine and one that chooses h2 by
// net/http, from the same cache.
func TestEngineTLS(t *testing.T) {
	g := newRig(t, fixed(200, "secure", "Cache-Control", "max-age=60"), nil)
	ts := httptest.NewUnstartedServer(nil) // for its certificate
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cert := ts.TLS
	if cert == nil {
		ts.StartTLS()
		cert = ts.TLS
		ts.Close()
	}
	srv := NewServer(g.edge, ServerOptions{TLS: &tls.Config{Certificates: cert.Certificates, NextProtos: []string{"h2", "http/1.1"}}})
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "https://" + ln.Addr().String() + "/s"
	for _, h2 := range []bool{false, true, true} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, ForceAttemptHTTP2: h2}
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		resp, err := (&http.Client{Transport: tr}).Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if wantMajor := map[bool]int{false: 1, true: 2}[h2]; resp.ProtoMajor != wantMajor || string(b) != "secure" {
			t.Fatalf("h2=%v: HTTP/%d %q", h2, resp.ProtoMajor, b)
		}
	}
	if n := g.hits.Load(); n != 1 {
		t.Fatalf("the origin was asked %d times, want 1", n)
	}
}

// failingListener fails its first Accepts as a listener out of file descriptors does.
type failingListener struct {
	net.Listener
	failures atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.failures.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// An Accept that fails with the listener open (out of file descriptors) is retried after a
// wait, as net/http retries it, instead of ending Serve: the clients that come later are served.
func TestServeOutlivesFailedAccepts(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "still here")
	}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: ln}
	fl.failures.Store(3)
	srv := NewServer(g.edge, ServerOptions{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(fl) }()
	t.Cleanup(func() { srv.Close() })
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + ln.Addr().String() + "/s")
	if err != nil {
		t.Fatalf("after failed Accepts: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(b) != "still here" {
		t.Fatalf("after failed Accepts: %d %q", resp.StatusCode, b)
	}
	srv.Close()
	select {
	case err := <-served:
		if err != http.ErrServerClosed {
			t.Fatalf("Serve after Close returned %v, want http.ErrServerClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after Close")
	}
}

// The engine's ResponseWriter keeps nothing of what a handler writes: a handler may reuse its
// buffer as soon as Write returns (io.Writer's contract), with a length or without.
func TestEngineWriterKeepsNoBuffer(t *testing.T) {
	const n = 5000
	g := newRig(t, fixed(200, "unused"), nil)
	for _, length := range []bool{true, false} {
		handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if length {
				w.Header().Set("Content-Length", strconv.Itoa(2*n))
			}
			buf := []byte(strings.Repeat("a", n))
			w.Write(buf)
			copy(buf, strings.Repeat("b", n))
			w.Write(buf)
		})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := NewServer(g.edge, ServerOptions{Handler: handler})
		go srv.Serve(ln)
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + ln.Addr().String() + "/x")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		srv.Close()
		if string(b) != strings.Repeat("a", n)+strings.Repeat("b", n) {
			t.Fatalf("with Content-Length %v: the answer is not what was written when it was written", length)
		}
	}
}
