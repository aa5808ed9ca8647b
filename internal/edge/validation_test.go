package edge

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"
)

// etagOrigin serves body version v with an ETag, answering 304 to a matching If-None-Match.
func etagOrigin(cc string, version *atomic.Int64, notModified *atomic.Int64) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tag := fmt.Sprintf(`"v%d"`, version.Load())
		w.Header().Set("ETag", tag)
		w.Header().Set("Cache-Control", cc)
		if r.Header.Get("If-None-Match") == tag {
			notModified.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		fmt.Fprintf(w, "body v%d", version.Load())
	}
}

// RFC 9111 section 4.3: a stale response with an ETag is validated with If-None-Match; a 304
// refreshes it (the client still gets the whole body), a 200 replaces it.
func TestValidationETag(t *testing.T) {
	var version, notModified atomic.Int64
	version.Store(1)
	g := newRig(t, etagOrigin("max-age=10", &version, &notModified), nil)
	g.expect(g.do("GET", "/a"), 200, "body v1", "Miss", 1)
	g.advance(11 * time.Second)
	g.expect(g.do("GET", "/a"), 200, "body v1", "RefreshHit", 2)
	if got := g.originSaw().Get("If-None-Match"); got != `"v1"` || notModified.Load() != 1 {
		t.Fatalf("origin saw If-None-Match %q and sent %d 304s, want \"v1\" and 1", got, notModified.Load())
	}
	g.expect(g.do("GET", "/a"), 200, "body v1", "Hit", 2) // fresh again for 10s
	g.advance(11 * time.Second)
	version.Store(2)
	g.expect(g.do("GET", "/a"), 200, "body v2", "Miss", 3)
	g.expect(g.do("GET", "/a"), 200, "body v2", "Hit", 3)
}

// Section 4.3.1: Last-Modified is sent back as If-Modified-Since; the 304's fields update the stored
// ones (section 4.3.4).
func TestValidationLastModified(t *testing.T) {
	lm := time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat)
	var n atomic.Int64
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Last-Modified", lm)
		w.Header().Set("Cache-Control", "max-age=10")
		w.Header().Set("X-Version", fmt.Sprint(n.Add(1)))
		if r.Header.Get("If-Modified-Since") == lm {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write([]byte("page"))
	}, nil)
	g.do("GET", "/a")
	g.advance(11 * time.Second)
	r := g.do("GET", "/a")
	g.expect(r, 200, "page", "RefreshHit", 2)
	if got := g.originSaw().Get("If-Modified-Since"); got != lm {
		t.Fatalf("origin saw If-Modified-Since %q, want %q", got, lm)
	}
	if r.header.Get("X-Version") != "2" {
		t.Fatalf("X-Version = %q, want the 304's 2", r.header.Get("X-Version"))
	}
}

// Section 5.2.2.4 and 5.2.1.4: no-cache in the response or the request means validate every time.
func TestNoCacheValidatesEveryTime(t *testing.T) {
	var version, notModified atomic.Int64
	g := newRig(t, etagOrigin("no-cache", &version, &notModified), nil)
	g.expect(g.do("GET", "/a"), 200, "body v0", "Miss", 1)
	g.expect(g.do("GET", "/a"), 200, "body v0", "RefreshHit", 2)
	g.expect(g.do("GET", "/a"), 200, "body v0", "RefreshHit", 3)

	g2 := newRig(t, etagOrigin("max-age=60", &version, &notModified), nil)
	g2.do("GET", "/a")
	g2.expect(g2.do("GET", "/a", "Cache-Control", "no-cache"), 200, "body v0", "RefreshHit", 2)
	g2.expect(g2.do("GET", "/a", "Pragma", "no-cache"), 200, "body v0", "RefreshHit", 3)
	g2.expect(g2.do("GET", "/a"), 200, "body v0", "Hit", 3)
}

// RFC 5861 section 3: within stale-while-revalidate a stale response is served at once and
// validated in the background.
func TestStaleWhileRevalidate(t *testing.T) {
	var version atomic.Int64
	version.Store(1)
	release := make(chan struct{})
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=10, stale-while-revalidate=30")
		if version.Load() == 2 {
			<-release // the revalidation waits here while the client is served
		}
		fmt.Fprintf(w, "v%d", version.Load())
	}, nil)
	g.do("GET", "/a")
	version.Store(2)
	g.advance(15 * time.Second)
	g.expect(g.do("GET", "/a"), 200, "v1", "StaleHit", g.hits.Load())
	close(release)
	waitFor(t, "the background revalidation", func() bool {
		o := g.stored("/a")
		return o != nil && string(o.body()) == "v2"
	})
	g.expect(g.do("GET", "/a"), 200, "v2", "Hit", 2)
	g.advance(50 * time.Second) // beyond the window: the client waits for the origin
	g.expect(g.do("GET", "/a"), 200, "v2", "Miss", 3)
}

// RFC 5861 section 4: within stale-if-error a stale response is served when the origin answers 5xx
// or cannot be reached; past it, or with must-revalidate, the error is passed on.
func TestStaleIfError(t *testing.T) {
	var failing atomic.Bool
	cc := "max-age=10, stale-if-error=60"
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/strict" {
			cc = "max-age=10, stale-if-error=60, must-revalidate"
		}
		w.Header().Set("Cache-Control", cc)
		if failing.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("down"))
			return
		}
		w.Write([]byte("ok"))
	}, nil)
	g.do("GET", "/a")
	g.do("GET", "/strict")
	failing.Store(true)
	g.advance(20 * time.Second)
	g.expect(g.do("GET", "/a"), 200, "ok", "StaleHit", 3)
	g.expect(g.do("GET", "/strict"), 503, "down", "Miss", 4)
	g.origin.Close() // unreachable
	g.expect(g.do("GET", "/a"), 200, "ok", "StaleHit", 4)
	g.advance(60 * time.Second)
	if r := g.do("GET", "/a"); r.status != http.StatusBadGateway {
		t.Fatalf("past stale-if-error with the origin down: %d, want 502", r.status)
	}
}
