package edgeplane

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// origin is a real HTTP server that records the paths it is asked for.
type origin struct {
	srv   *httptest.Server
	mu    sync.Mutex
	paths []string
}

func newOrigin(t *testing.T) *origin {
	o := &origin{}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		o.mu.Lock()
		o.paths = append(o.paths, r.URL.Path)
		o.mu.Unlock()
		io.WriteString(w, "ok")
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *origin) asked(path string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range o.paths {
		if p == path {
			return true
		}
	}
	return false
}

// startLocation serves a Distribution in front of o on a cleartext listener and returns its address.
func startLocation(t *testing.T, o *origin) string {
	d := &v1alpha1.Distribution{Metadata: v1alpha1.ObjectMeta{Name: "guard"}, Spec: v1alpha1.DistributionSpec{
		Listeners: []v1alpha1.EdgeListener{{Name: "http", Address: "127.0.0.1", Port: 0}},
		Origins:   []v1alpha1.EdgeOrigin{{Name: "o", URL: o.srv.URL}},
		Behaviors: []v1alpha1.EdgeBehavior{{PathPattern: "*", Origin: "o", AllowedMethods: []string{"POST"}}},
	}}
	v1alpha1.SetDistributionDefaults(d)
	l, err := NewLocation(d, LocationOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(l.Close)
	return l.Status().Listeners[0].Address
}

// exchange sends raw on a new connection and returns everything read until the edge closes it, or
// fails if it does not within 10 seconds.
func exchange(t *testing.T, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go io.WriteString(c, raw) // a refusal may come before the whole request is written
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	b, err := io.ReadAll(c)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the edge kept the connection open; read so far: %.80q", b)
	}
	return string(b)
}

// TestHostileRequestsRefused sends, over TCP, the requests the load balancer's listeners refuse, and
// checks that the edge's refuse them too without asking the origin.
func TestHostileRequestsRefused(t *testing.T) {
	o := newOrigin(t)
	addr := startLocation(t, o)
	var manyHeaders strings.Builder
	for i := range maxHeaders + 1 {
		fmt.Fprintf(&manyHeaders, "X-H%d: v\r\n", i)
	}
	bigChunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", maxBodyBytes+1, strings.Repeat("a", maxBodyBytes+1))
	cases := []struct{ name, raw, want string }{
		{"garbage", "\x00\x01 nonsense\r\n\r\n", "HTTP/1.1 400"},
		{"bad header line", "GET /r HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", "HTTP/1.1 400"},
		{"bad method", "G(T /r HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1 400"},
		{"no host", "GET /r HTTP/1.1\r\n\r\n", "HTTP/1.1 400"},
		{"two hosts", "GET /r HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", "HTTP/1.1 400"},
		{"control character in a value", "GET /r HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n", "HTTP/1.1 400"},
		{"unsupported version", "GET /r HTTP/2.0\r\nHost: x\r\n\r\n", "HTTP/1.1 505"},
		{"huge header", "GET /r HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 2*maxHeaderBytes) + "\r\n\r\n", "HTTP/1.1 431"},
		{"too many headers", "GET /r HTTP/1.1\r\nHost: x\r\n" + manyHeaders.String() + "\r\n", "HTTP/1.1 431"},
		{"smuggling: differing Content-Lengths", "POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", "HTTP/1.1 400"},
		{"unsupported Transfer-Encoding", "POST /r HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n", "HTTP/1.1 501"},
		{"unsupported Expect", "POST /r HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nContent-Length: 1\r\n\r\na", "HTTP/1.1 417"},
		{"CONNECT", "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n", "HTTP/1.1 405"},
		{"body too large", fmt.Sprintf("POST /r HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", maxBodyBytes+1), "HTTP/1.1 413"},
		{"chunked body too large", "POST /r HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + bigChunked, "HTTP/1.1 413"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := exchange(t, addr, tc.raw+"GET /after HTTP/1.1\r\nHost: x\r\n\r\n"); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("got %.80q, want %q", got, tc.want)
			}
		})
	}
	if o.asked("/after") {
		t.Fatal("a request sent after a refused one on its connection reached the origin")
	}
	if got := exchange(t, addr, "GET /fine HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") || !o.asked("/fine") {
		t.Fatalf("an honest request got %.80q", got)
	}
}

// TestSmugglingClosesTheConnection sends requests framed one way by Content-Length and another by
// Transfer-Encoding, with a request hidden where a front reading the other framing sees body: the edge
// answers the first and closes the connection, so that the hidden one never reaches the origin.
func TestSmugglingClosesTheConnection(t *testing.T) {
	o := newOrigin(t)
	addr := startLocation(t, o)
	hidden := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	cases := []struct{ name, raw string }{
		{"Content-Length and Transfer-Encoding", fmt.Sprintf(
			"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n%s", 5+len(hidden), hidden)},
		{"Transfer-Encoding first", fmt.Sprintf(
			"POST /a HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: %d\r\n\r\n0\r\n\r\n%s", 5+len(hidden), hidden)},
		{"Transfer-Encoding in HTTP/1.0", "POST /a HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n" +
			"Content-Length: 5\r\n\r\n0\r\n\r\n" + hidden},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := exchange(t, addr, tc.raw)
			if n := strings.Count(got, "HTTP/1."); n != 1 {
				t.Fatalf("got %d answers, want 1: %.200q", n, got)
			}
			if o.asked("/smuggled") {
				t.Fatal("the hidden request reached the origin")
			}
		})
	}
}

// TestSlowHeadersCutOff checks that clients trickling their headers a byte at a time are cut off when
// the header deadline passes, and that an honest client is served meanwhile.
func TestSlowHeadersCutOff(t *testing.T) {
	defer func(d time.Duration) { readHeaderTimeout = d }(readHeaderTimeout)
	readHeaderTimeout = 300 * time.Millisecond
	o := newOrigin(t)
	addr := startLocation(t, o)
	var slow []net.Conn
	for range 20 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: x\r\nX-Slow: ")
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
	for i, c := range slow {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, c); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("slow client %d still connected after 5s", i)
			}
		}
	}
	if got := exchange(t, addr, "GET /fine HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); !strings.HasPrefix(got, "HTTP/1.1 200") {
		t.Fatalf("an honest client got %.80q", got)
	}
	if o.asked("/slow") {
		t.Fatal("a request whose headers never ended reached the origin")
	}
}
