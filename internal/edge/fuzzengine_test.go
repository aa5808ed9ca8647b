package edge

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// FuzzEngine feeds arbitrary bytes, as one client connection, to the engine in front of a real
// origin with some objects stored. It must not panic, and what it answers before it hands the
// connection over or ends it must be well-formed responses.
// Run: go test ./internal/edge -run '^$' -fuzz FuzzEngine -fuzztime 2m
func FuzzEngine(f *testing.F) {
	for _, s := range []string{
		"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"HEAD /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b?q=1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nIf-None-Match: \"v\"\r\nRange: bytes=0-1\r\n\r\n",
		"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhiGET /a HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"\r\nGET http://x/a HTTP/1.1\r\nHost: y\r\n\r\n",
		"GET /a HTTP/1.1\r\nHost: x\r\nX: \x01\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	g := newRig(&testing.T{}, fixed(200, "stored", "Cache-Control", "max-age=600", "ETag", `"v"`), nil)
	f.Cleanup(func() { g.srv.Close(); g.origin.Close() })
	for _, p := range []string{"/a", "/b?q=1"} {
		warm := &fakeConn{in: bytes.NewReader([]byte("GET " + p + " HTTP/1.1\r\nHost: x\r\n\r\n"))}
		g.srv.srv.serveH1(warm, warm)
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		c := &fakeConn{in: bytes.NewReader(raw)}
		g.srv.srv.serveH1(c, c)
		out := c.written()
		if len(out) == 0 {
			return
		}
		// The first answer is enough to check the framing the engine wrote.
		method := "GET"
		if bytes.HasPrefix(bytes.TrimLeft(raw, "\r\n"), []byte("HEAD ")) {
			method = "HEAD"
		}
		resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), &http.Request{Method: method})
		if err != nil || resp.StatusCode < 100 || resp.StatusCode > 599 {
			t.Fatalf("unparsable answer %q: %v\ninput: %q", out, err, raw)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil && !resp.Close {
			t.Fatalf("answer's body in %q: %v\ninput: %q", out, err, raw)
		}
	})
}

// fakeConn is a client connection whose bytes come from in and whose answers are kept.
type fakeConn struct {
	in  io.Reader
	mu  sync.Mutex
	out bytes.Buffer
}

func (c *fakeConn) Read(p []byte) (int, error) { return c.in.Read(p) }
func (c *fakeConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}
func (c *fakeConn) written() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.out.Bytes())
}
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }
