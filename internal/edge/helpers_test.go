package edge

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// rig is an edge in front of a real origin, with a real client and a clock the test moves forward.
type rig struct {
	t       *testing.T
	edge    *Edge
	srv     *testServer
	origin  *httptest.Server
	client  *http.Client
	offset  atomic.Int64 // added to the wall clock, in nanoseconds
	hits    atomic.Int64 // requests the origin received
	mu      sync.Mutex
	lastReq *http.Request // the origin's last request, its header cloned
}

func newRig(t *testing.T, origin http.HandlerFunc, tune func(*Behavior)) *rig {
	t.Helper()
	g := &rig{t: t}
	g.origin = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.hits.Add(1)
		g.mu.Lock()
		g.lastReq = &http.Request{Method: r.Method, URL: r.URL, Header: r.Header.Clone()}
		g.mu.Unlock()
		// The origin's clock is the edge's, so that the Date it sends agrees with the moved clock.
		w.Header().Set("Date", g.edge.now().UTC().Format(http.TimeFormat))
		origin(w, r)
	}))
	t.Cleanup(g.origin.Close)
	u, _ := url.Parse(g.origin.URL)
	b := Behavior{PathPattern: "*", Origin: Origin{Primary: u}, Policy: Policy{QueryString: true},
		AllowedMethods: []string{"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH"}}
	if tune != nil {
		tune(&b)
	}
	e, err := New(Config{Behaviors: []Behavior{b}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	e.now = func() time.Time { return time.Now().Add(time.Duration(g.offset.Load())) }
	g.edge = e
	g.srv = startServer(t, e)
	g.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 2000}}
	t.Cleanup(g.client.CloseIdleConnections)
	return g
}

// advance moves the edge's clock forward.
func (g *rig) advance(d time.Duration) { g.offset.Add(int64(d)) }

// stored returns what the edge holds for a path requested without extra fields.
func (g *rig) stored(path string) *object {
	req := httptest.NewRequest("GET", g.srv.URL+path, nil)
	return g.edge.store.lookup(primaryKey(req, Policy{QueryString: true}), req, Policy{}, "")
}

// originSaw returns the header of the origin's last request.
func (g *rig) originSaw() http.Header {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.lastReq.Header
}

type reply struct {
	status int
	header http.Header
	body   string
}

// do sends a request through the edge; hdr is pairs of name, value.
func (g *rig) do(method, path string, hdr ...string) reply {
	g.t.Helper()
	req, err := http.NewRequest(method, g.srv.URL+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := g.client.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		g.t.Fatalf("%s %s: reading body: %v", method, path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

// expect checks a reply's status, body and X-Cache, and the origin's request count so far.
func (g *rig) expect(r reply, status int, body, xcache string, originHits int64) {
	g.t.Helper()
	if r.status != status || r.body != body || r.header.Get("X-Cache") != xcache {
		g.t.Fatalf("got %d %q X-Cache=%q, want %d %q X-Cache=%q", r.status, r.body, r.header.Get("X-Cache"), status, body, xcache)
	}
	if n := g.hits.Load(); n != originHits {
		g.t.Fatalf("origin received %d requests, want %d", n, originHits)
	}
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fixed answers every request with the same status, fields and body.
func fixed(status int, body string, hdr ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Add(hdr[i], hdr[i+1])
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// testServer is an edge served by its own server (the engine, and net/http for what it hands
// over) on a loopback port.
type testServer struct {
	URL string
	srv *Server
}

// startServer serves e until the test ends.
func startServer(t testing.TB, e *Edge) *testServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{URL: "http://" + ln.Addr().String(), srv: NewServer(e, ServerOptions{})}
	go s.srv.Serve(ln)
	t.Cleanup(s.Close)
	return s
}

func (s *testServer) Close() { s.srv.Close() }
