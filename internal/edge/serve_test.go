package edge

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// HEAD is answered from a stored GET (RFC 9110 section 9.3.2), with its fields and no body; a HEAD
// miss fetches the GET, so the next GET is a hit.
func TestHeadFromStoredGet(t *testing.T) {
	g := newRig(t, fixed(200, "hello", "Cache-Control", "max-age=60", "Content-Type", "text/plain"), nil)
	g.do("GET", "/a")
	r := g.do("HEAD", "/a")
	g.expect(r, 200, "", "Hit", 1)
	if r.header.Get("Content-Length") != "5" || r.header.Get("Content-Type") != "text/plain" {
		t.Fatalf("HEAD fields: %v", r.header)
	}
	g.expect(g.do("HEAD", "/b"), 200, "", "Miss", 2)
	g.mu.Lock()
	method := g.lastReq.Method
	g.mu.Unlock()
	if method != "GET" {
		t.Fatalf("a HEAD miss went to the origin as %s, want GET", method)
	}
	g.expect(g.do("GET", "/b"), 200, "hello", "Hit", 2)
}

// A client's conditional request that the stored response satisfies gets 304 from the edge
// (RFC 9111 section 4.3.2), without the origin.
func TestConditionalRequestGets304(t *testing.T) {
	lm := "Mon, 02 Jan 2006 15:04:05 GMT"
	g := newRig(t, fixed(200, "x", "Cache-Control", "max-age=60", "ETag", `"abc"`, "Last-Modified", lm), nil)
	g.do("GET", "/a")
	g.expect(g.do("GET", "/a", "If-None-Match", `"abc"`), 304, "", "Hit", 1)
	g.expect(g.do("GET", "/a", "If-None-Match", `"zzz"`), 200, "x", "Hit", 1)
	g.expect(g.do("GET", "/a", "If-Modified-Since", lm), 304, "", "Hit", 1)
	// The client's conditionals never reach the origin on a miss: the edge needs the whole body.
	g.expect(g.do("GET", "/b", "If-None-Match", `"abc"`), 304, "", "Miss", 2)
	if g.originSaw().Get("If-None-Match") != "" {
		t.Fatal("the client's If-None-Match was forwarded")
	}
}

// A Range request is answered 206 from a stored full response; on a miss the origin is asked for
// the whole representation (RFC 9110 section 14).
func TestRangeFromStoredResponse(t *testing.T) {
	g := newRig(t, fixed(200, "0123456789", "Cache-Control", "max-age=60", "ETag", `"e"`), nil)
	r := g.do("GET", "/a", "Range", "bytes=2-5")
	g.expect(r, http.StatusPartialContent, "2345", "Miss", 1)
	if g.originSaw().Get("Range") != "" {
		t.Fatal("the Range went to the origin")
	}
	r = g.do("GET", "/a", "Range", "bytes=-3")
	g.expect(r, http.StatusPartialContent, "789", "Hit", 1)
	if r.header.Get("Content-Range") != "bytes 7-9/10" {
		t.Fatalf("Content-Range %q", r.header.Get("Content-Range"))
	}
	g.expect(g.do("GET", "/a", "Range", "bytes=2-3", "If-Range", `"other"`), 200, "0123456789", "Hit", 1)
	if r := g.do("GET", "/a", "Range", "bytes=20-30"); r.status != http.StatusRequestedRangeNotSatisfiable || g.hits.Load() != 1 {
		t.Fatalf("unsatisfiable range: %d, origin hits %d", r.status, g.hits.Load())
	}
}

// A Range request for an object too large to store goes to the origin with its Range: the first
// learns the size from a whole response it drops, the later ones ask for their part at once, and a
// request without Range still gets the whole object streamed.
func TestRangeOfUnstorableObjectPassedToOrigin(t *testing.T) {
	big := strings.Repeat("0123456789", 500)
	for _, chunked := range []bool{false, true} {
		g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
			w.Header().Set("Content-Type", "text/plain")
			if chunked && r.Header.Get("Range") == "" {
				w.(http.Flusher).Flush() // no Content-Length: the edge finds the size while reading
				io.WriteString(w, big)
				return
			}
			http.ServeContent(w, r, "", time.Time{}, strings.NewReader(big))
		}, func(b *Behavior) { b.MaxObjectSize = 1000 })
		g.expect(g.do("GET", "/a", "Range", "bytes=10-19"), http.StatusPartialContent, "0123456789", "Pass", 2)
		if got := g.originSaw().Get("Range"); got != "bytes=10-19" {
			t.Fatalf("the origin saw Range %q, want the client's", got)
		}
		r := g.do("GET", "/a", "Range", "bytes=4995-")
		g.expect(r, http.StatusPartialContent, "56789", "Pass", 3)
		if r.header.Get("Content-Range") != "bytes 4995-4999/5000" {
			t.Fatalf("Content-Range %q", r.header.Get("Content-Range"))
		}
		g.expect(g.do("GET", "/a"), 200, big, "Miss", 4)
	}
}

// A stored response of another status is served as it came, with its body.
func TestStoredNon200(t *testing.T) {
	g := newRig(t, fixed(404, "gone", "Cache-Control", "max-age=60"), nil)
	g.do("GET", "/a")
	g.expect(g.do("GET", "/a"), 404, "gone", "Hit", 1)
	g.expect(g.do("HEAD", "/a"), 404, "", "Hit", 1)
}

// Methods the behavior does not allow get 405 with Allow; paths no behavior matches get 404.
func TestMethodsAndPaths(t *testing.T) {
	g := newRig(t, fixed(200, "x"), func(b *Behavior) {
		b.AllowedMethods = []string{"GET", "HEAD"}
		b.PathPattern = "/static/*"
	})
	r := g.do("POST", "/static/a")
	if r.status != http.StatusMethodNotAllowed || len(r.header.Values("Allow")) != 2 {
		t.Fatalf("POST: %d Allow=%v", r.status, r.header.Values("Allow"))
	}
	if r := g.do("GET", "/other"); r.status != http.StatusNotFound || g.hits.Load() != 0 {
		t.Fatalf("unmatched path: %d, origin hits %d", r.status, g.hits.Load())
	}
}

func TestMatchPath(t *testing.T) {
	for _, c := range []struct {
		pattern, path string
		want          bool
	}{
		{"*", "/anything/at/all", true},
		{"/static/*", "/static/a/b.css", true},
		{"/static/*", "/stat", false},
		{"*.jpg", "/img/a.jpg", true},
		{"*.jpg", "/img/a.jpeg", false},
		{"/a?c", "/abc", true},
		{"/a?c", "/ac", false},
		{"/api/*/items", "/api/v1/x/items", true},
		{"/exact", "/exact", true},
		{"/exact", "/exact/", false},
	} {
		if got := MatchPath(c.pattern, c.path); got != c.want {
			t.Errorf("MatchPath(%q, %q) = %v", c.pattern, c.path, got)
		}
	}
}
