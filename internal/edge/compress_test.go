package edge

import (
	"compress/gzip"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/andybalholm/brotli"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// page is a compressible body above the minimum size.
var page = strings.Repeat("<p>the edge compresses what it stores</p>\n", 100)

// compressing is a rig whose behavior compresses, in front of an origin that serves page as HTML
// with an ETag, and fails the test if the origin is ever asked for a coding.
func compressing(t *testing.T, hdr ...string) *rig {
	t.Helper()
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		if ae := r.Header.Get("Accept-Encoding"); strings.Contains(ae, "br") {
			t.Errorf("the origin was asked for %q: the edge stores the identity and compresses itself", ae)
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("ETag", `"p1"`)
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		io.WriteString(w, page)
	}, func(b *Behavior) { b.Policy.Compress = true })
	// A client that sends the Accept-Encoding it is given, or none, and never decodes by itself.
	g.client = &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(g.client.CloseIdleConnections)
	return g
}

// decoded is a reply's body decoded by its Content-Encoding.
func decoded(t *testing.T, r reply) string {
	t.Helper()
	var rd io.Reader = strings.NewReader(r.body)
	switch ce := r.header.Get("Content-Encoding"); ce {
	case "":
		return r.body
	case "gzip":
		zr, err := gzip.NewReader(rd)
		if err != nil {
			t.Fatalf("gzip: %v", err)
		}
		rd = zr
	case "br":
		rd = brotli.NewReader(rd)
	default:
		t.Fatalf("unexpected Content-Encoding %q", ce)
	}
	b, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("decoding %s: %v", r.header.Get("Content-Encoding"), err)
	}
	return string(b)
}

// The client's Accept-Encoding picks br, gzip or the identity, each compressed once from the one
// object fetched and then stored as a variant of its own: one origin request for all of them.
func TestCompressionNegotiatedAndStoredAsVariants(t *testing.T) {
	g := compressing(t)
	cases := []struct {
		accept, coding, xcache string
	}{
		{"br", "br", "Miss"},
		{"gzip, deflate", "gzip", "Hit"},
		{"", "", "Hit"},
		{"gzip;q=1.0, br;q=0.5", "gzip", "Hit"},
		{"br;q=0, gzip;q=0", "", "Hit"},
		{"*", "br", "Hit"},
		{"identity", "", "Hit"},
		{"gzip, deflate, br", "br", "Hit"},
	}
	for _, c := range cases {
		var r reply
		if c.accept == "" {
			r = g.do("GET", "/a")
		} else {
			r = g.do("GET", "/a", "Accept-Encoding", c.accept)
		}
		if r.status != 200 || r.header.Get("X-Cache") != c.xcache || r.header.Get("Content-Encoding") != c.coding {
			t.Fatalf("Accept-Encoding %q: %d X-Cache=%q Content-Encoding=%q, want 200 %q %q",
				c.accept, r.status, r.header.Get("X-Cache"), r.header.Get("Content-Encoding"), c.xcache, c.coding)
		}
		if got := decoded(t, r); got != page {
			t.Fatalf("Accept-Encoding %q: the decoded body differs from the origin's (%d bytes, want %d)", c.accept, len(got), len(page))
		}
		if c.coding != "" && len(r.body) >= len(page) {
			t.Fatalf("Accept-Encoding %q: %d bytes coded, no smaller than the %d of the identity", c.accept, len(r.body), len(page))
		}
		if !strings.Contains(r.header.Get("Vary"), "Accept-Encoding") {
			t.Fatalf("Accept-Encoding %q: Vary %q does not name Accept-Encoding", c.accept, r.header.Get("Vary"))
		}
	}
	if n := g.hits.Load(); n != 1 {
		t.Fatalf("the origin received %d requests, want 1", n)
	}
	if n := testutil.ToFloat64(g.edge.Metrics().compressions); n != 2 {
		t.Fatalf("%v compressions, want 2: each coding is made once and then served from the store", n)
	}
}

// A coded representation has an entity tag of its own, which a client's conditional request
// matches; a Range applies to the coded bytes (RFC 9110 sections 8.8.3 and 14).
func TestCompressionETagAndConditionals(t *testing.T) {
	g := compressing(t)
	r := g.do("GET", "/a", "Accept-Encoding", "gzip")
	if etag := r.header.Get("ETag"); etag != `"p1-gzip"` {
		t.Fatalf("gzip ETag %q, want \"p1-gzip\"", etag)
	}
	g.expect(g.do("GET", "/a", "Accept-Encoding", "gzip", "If-None-Match", `"p1-gzip"`), 304, "", "Hit", 1)
	br := g.do("GET", "/a", "Accept-Encoding", "br")
	if br.header.Get("ETag") != `"p1-br"` {
		t.Fatalf("br ETag %q, want \"p1-br\"", br.header.Get("ETag"))
	}
	// The gzip representation's tag does not match the br one.
	g.expect(g.do("GET", "/a", "Accept-Encoding", "br", "If-None-Match", `"p1-gzip"`), 200, br.body, "Hit", 1)
	part := g.do("GET", "/a", "Accept-Encoding", "gzip", "Range", "bytes=0-9")
	if part.status != http.StatusPartialContent || part.body != r.body[:10] {
		t.Fatalf("a Range of the gzip representation: %d %q, want 206 and its first 10 bytes", part.status, part.body)
	}
}

// What must not or need not be compressed is served as the origin sent it: a body of its own
// coding, no-transform, a type that is not textual, a body below the minimum, and any response of
// a behavior that does not compress.
func TestCompressionLeavesAlone(t *testing.T) {
	for name, hdr := range map[string][]string{
		"origin's own coding": {"Content-Encoding", "zstd"},
		"no-transform":        {"Cache-Control", "max-age=60, no-transform"},
		"not textual":         {"Content-Type", "image/png"},
	} {
		t.Run(name, func(t *testing.T) {
			g := compressing(t, hdr...)
			r := g.do("GET", "/a", "Accept-Encoding", "gzip, br")
			if ce := r.header.Get("Content-Encoding"); ce != hdr[1] && ce != "" || r.body != page {
				t.Fatalf("Content-Encoding %q and %d bytes, want the origin's response as it was", ce, len(r.body))
			}
		})
	}
	t.Run("small", func(t *testing.T) {
		g := newRig(t, fixed(200, "tiny", "Cache-Control", "max-age=60", "Content-Type", "text/plain"),
			func(b *Behavior) { b.Policy.Compress = true })
		if r := g.do("GET", "/a", "Accept-Encoding", "gzip"); r.header.Get("Content-Encoding") != "" || r.body != "tiny" {
			t.Fatalf("a 4-byte body was served %q", r.header.Get("Content-Encoding"))
		}
	})
	t.Run("behavior without compression", func(t *testing.T) {
		g := newRig(t, fixed(200, page, "Cache-Control", "max-age=60", "Content-Type", "text/html"), nil)
		r := g.do("GET", "/a", "Accept-Encoding", "br")
		if r.header.Get("Content-Encoding") != "" || r.body != page || r.header.Get("Vary") != "" {
			t.Fatalf("Content-Encoding %q Vary %q: compressed without being asked to", r.header.Get("Content-Encoding"), r.header.Get("Vary"))
		}
	})
}

// A response fetched again replaces the coded variants made from the one before: a client of
// another coding never gets the old content.
func TestCompressionVariantsFollowTheIdentity(t *testing.T) {
	var version atomic.Value
	version.Store("one")
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Content-Type", "text/plain")
		io.WriteString(w, version.Load().(string)+page)
	}, func(b *Behavior) { b.Policy.Compress = true })
	g.client = &http.Client{Transport: &http.Transport{DisableCompression: true}}
	t.Cleanup(g.client.CloseIdleConnections)
	g.do("GET", "/a", "Accept-Encoding", "gzip")
	version.Store("two")
	// no-cache makes the edge fetch the identity again; the gzip variant of the old one must go
	// with it, not be served beside the new identity until it expires.
	if r := g.do("GET", "/a", "Cache-Control", "no-cache"); r.body != "two"+page {
		t.Fatalf("no-cache: got %.3q", r.body)
	}
	r := g.do("GET", "/a", "Accept-Encoding", "gzip")
	if got := decoded(t, r); !strings.HasPrefix(got, "two") {
		t.Fatalf("gzip after the identity changed: %.3q, want the new content", got)
	}
}

func TestNegotiate(t *testing.T) {
	for accept, want := range map[string]string{
		"":                     "",
		"identity":             "",
		"gzip":                 "gzip",
		"x-gzip":               "gzip",
		"br":                   "br",
		"gzip, br":             "br",
		"br;q=0.8, gzip":       "gzip",
		"br;q=0.8, gzip;q=0.8": "br",
		"*;q=0.5":              "br",
		"*, br;q=0":            "gzip",
		"gzip;q=0, br;q=0":     "",
		"gzip;q=x":             "",
		"GZIP ; Q=0.3":         "gzip",
		"deflate, zstd":        "",
	} {
		if got := negotiate(http.Header{"Accept-Encoding": {accept}}); got != want {
			t.Errorf("negotiate(%q) = %q, want %q", accept, got, want)
		}
	}
}
