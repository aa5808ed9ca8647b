package edge

import (
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// RFC 9111 section 4.1: a response with Vary is reused only for requests whose varying fields match;
// each variant is stored beside the others.
func TestVaryStoresVariants(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "Accept-Language")
		w.Write([]byte("lang=" + r.Header.Get("Accept-Language")))
	}, nil)
	g.expect(g.do("GET", "/a", "Accept-Language", "fr"), 200, "lang=fr", "Miss", 1)
	g.expect(g.do("GET", "/a", "Accept-Language", "de"), 200, "lang=de", "Miss", 2)
	g.expect(g.do("GET", "/a", "Accept-Language", "fr"), 200, "lang=fr", "Hit", 2)
	g.expect(g.do("GET", "/a", "Accept-Language", "de"), 200, "lang=de", "Hit", 2)
	g.expect(g.do("GET", "/a"), 200, "lang=", "Miss", 3)
}

// An entry holds at most maxVariants responses: storing one more drops the variant least recently
// stored or served, not the new one nor one clients keep asking for.
func TestVariantsBounded(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("Vary", "X-V")
		w.Write([]byte("v=" + r.Header.Get("X-V")))
	}, nil)
	for i := range maxVariants {
		v := strconv.Itoa(i)
		g.expect(g.do("GET", "/a", "X-V", v), 200, "v="+v, "Miss", int64(i+1))
	}
	g.expect(g.do("GET", "/a", "X-V", "0"), 200, "v=0", "Hit", maxVariants) // 0 used since 1 was stored
	g.expect(g.do("GET", "/a", "X-V", "new"), 200, "v=new", "Miss", maxVariants+1)
	pk := primaryKey(httptest.NewRequest("GET", g.srv.URL+"/a", nil), Policy{QueryString: true})
	if n := len(g.edge.store.entry(pk).variants); n != maxVariants {
		t.Fatalf("the entry holds %d variants, want %d", n, maxVariants)
	}
	g.expect(g.do("GET", "/a", "X-V", "new"), 200, "v=new", "Hit", maxVariants+1)
	g.expect(g.do("GET", "/a", "X-V", "0"), 200, "v=0", "Hit", maxVariants+1)
	g.expect(g.do("GET", "/a", "X-V", "2"), 200, "v=2", "Hit", maxVariants+1)
	g.expect(g.do("GET", "/a", "X-V", "1"), 200, "v=1", "Miss", maxVariants+2) // the least recently used went
}

// Vary: * never matches a later request, so such a response is not stored.
func TestVaryStarNotStored(t *testing.T) {
	g := newRig(t, fixed(200, "x", "Cache-Control", "max-age=60", "Vary", "*"), nil)
	g.do("GET", "/a")
	g.expect(g.do("GET", "/a"), 200, "x", "Miss", 2)
}

// The behavior's cache key: query string on or off, chosen headers and cookies; cookies it does
// not key on do not reach the origin.
func TestPolicyCacheKey(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		c, _ := r.Cookie("tier")
		other, _ := r.Cookie("session")
		w.Write([]byte(r.URL.RawQuery + "|" + r.Header.Get("X-Device") + "|" + c.String() + "|" + other.String()))
	}, func(b *Behavior) {
		b.Policy.QueryString = false
		b.Policy.Headers = []string{"x-device"}
		b.Policy.Cookies = []string{"tier"}
	})
	g.expect(g.do("GET", "/a?x=1", "X-Device", "phone", "Cookie", "tier=gold; session=s1"), 200, "x=1|phone|tier=gold|", "Miss", 1)
	g.expect(g.do("GET", "/a?x=2", "X-Device", "phone", "Cookie", "tier=gold; session=s2"), 200, "x=1|phone|tier=gold|", "Hit", 1)
	g.expect(g.do("GET", "/a", "X-Device", "tablet", "Cookie", "tier=gold"), 200, "|tablet|tier=gold|", "Miss", 2)
	g.expect(g.do("GET", "/a", "X-Device", "phone", "Cookie", "tier=lead"), 200, "|phone|tier=lead|", "Miss", 3)
}

// Sections 3 and 5.2.2: no-store, private, a request's Authorization without public, s-maxage or
// must-revalidate, and Set-Cookie keep a response out of a shared cache; public lets an
// authorized one in.
func TestNotStored(t *testing.T) {
	cases := []struct {
		name string
		hdr  []string
		req  []string
	}{
		{"no-store", []string{"Cache-Control", "max-age=60, no-store"}, nil},
		{"request no-store", []string{"Cache-Control", "max-age=60"}, []string{"Cache-Control", "no-store"}},
		{"private", []string{"Cache-Control", "max-age=60, private"}, nil},
		{"authorization", []string{"Cache-Control", "max-age=60"}, []string{"Authorization", "Bearer x"}},
		{"set-cookie", []string{"Cache-Control", "max-age=60", "Set-Cookie", "id=1"}, nil},
		{"no freshness, no validator", []string{"Content-Type", "text/plain"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newRig(t, fixed(200, "x", c.hdr...), nil)
			g.do("GET", "/a", c.req...)
			g.expect(g.do("GET", "/a", c.req...), 200, "x", "Miss", 2)
		})
	}
	t.Run("authorization with public", func(t *testing.T) {
		g := newRig(t, fixed(200, "x", "Cache-Control", "public, max-age=60"), nil)
		g.do("GET", "/a", "Authorization", "Bearer x")
		g.expect(g.do("GET", "/a", "Authorization", "Bearer x"), 200, "x", "Hit", 1)
	})
}

// A body larger than the behavior's maximum is streamed whole to the client and not stored.
func TestOversizedStreamedNotStored(t *testing.T) {
	big := strings.Repeat("0123456789", 500)
	for _, chunked := range []bool{false, true} {
		g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=60")
			if chunked {
				w.(http.Flusher).Flush() // no Content-Length: the edge finds the size while reading
			}
			w.Write([]byte(big))
		}, func(b *Behavior) { b.MaxObjectSize = 1000 })
		g.expect(g.do("GET", "/a"), 200, big, "Miss", 1)
		g.expect(g.do("GET", "/a"), 200, big, "Miss", 2)
		if g.stored("/a") != nil {
			t.Fatal("an oversized response was stored")
		}
	}
}

// An origin that breaks its response (a body shorter than its Content-Length) gets the client a 502
// and leaves nothing stored: the next request goes to the origin and stores its good answer.
func TestMalformedResponseNeverPoisons(t *testing.T) {
	var broken atomic.Bool
	broken.Store(true)
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		if broken.Load() {
			conn, buf, _ := w.(http.Hijacker).Hijack()
			buf.WriteString("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 100\r\n\r\nshort")
			buf.Flush()
			conn.Close()
			return
		}
		w.Header().Set("Cache-Control", "max-age=60")
		w.Write([]byte("good"))
	}, nil)
	if r := g.do("GET", "/a"); r.status != http.StatusBadGateway {
		t.Fatalf("truncated origin response: %d %q, want 502", r.status, r.body)
	}
	if g.stored("/a") != nil {
		t.Fatal("a truncated response was stored")
	}
	broken.Store(false)
	g.expect(g.do("GET", "/a"), 200, "good", "Miss", 2)
	g.expect(g.do("GET", "/a"), 200, "good", "Hit", 2)
}

// An origin whose header is malformed or too large gets the client a 502 and stores nothing.
func TestMalformedHeaderNeverPoisons(t *testing.T) {
	for name, head := range map[string]string{
		"bad status":   "HTTP/1.1 2x0 OK\r\nCache-Control: max-age=60\r\n\r\n",
		"bad length":   "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: -5\r\n\r\n",
		"huge header":  "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nX-Big: " + strings.Repeat("a", 100<<10) + "\r\nContent-Length: 1\r\n\r\nx",
		"two lengths":  "HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy",
		"no separator": "HTTP/1.1 200 OK\r\nCache-Control max-age=60\r\n\r\n",
	} {
		t.Run(name, func(t *testing.T) {
			g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
				conn, buf, _ := w.(http.Hijacker).Hijack()
				defer conn.Close()
				buf.WriteString(head)
				buf.Flush()
			}, nil)
			if r := g.do("GET", "/a"); r.status != http.StatusBadGateway {
				t.Fatalf("%d %q, want 502", r.status, r.body)
			}
			if g.stored("/a") != nil {
				t.Fatal("stored")
			}
		})
	}
}

// RFC 9111 section 4.4: a successful unsafe request invalidates its target URI and the Location and
// Content-Location of the same origin, not those of another host, and not after an error.
func TestUnsafeMethodInvalidates(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET":
			w.Header().Set("Cache-Control", "max-age=600")
			w.Write([]byte("get " + r.URL.Path))
		case r.URL.Path == "/fail":
			w.WriteHeader(http.StatusInternalServerError)
		case r.URL.Path == "/create":
			w.Header().Set("Location", "/b")
			w.Header().Set("Content-Location", "http://"+r.Host+"/c")
			w.WriteHeader(http.StatusCreated)
		case r.URL.Path == "/foreign":
			w.Header().Set("Location", "http://other.example/d")
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}, nil)
	for _, p := range []string{"/a", "/b", "/c", "/d", "/fail"} {
		g.do("GET", p)
	}
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		g.do("GET", "/a")
		before := g.hits.Load()
		g.do(m, "/a")
		g.expect(g.do("GET", "/a"), 200, "get /a", "Miss", before+2)
	}
	g.do("POST", "/create")
	for _, p := range []string{"/b", "/c"} {
		if g.stored(p) != nil {
			t.Fatalf("%s still stored after a POST whose Location/Content-Location named it", p)
		}
	}
	g.do("POST", "/foreign")
	g.do("POST", "/fail")
	if g.stored("/d") == nil || g.stored("/fail") == nil {
		t.Fatal("another host's URI, or the target of a failed POST, was invalidated")
	}
}

// A 5xx or an unreachable primary origin sends a GET to the secondary.
func TestSecondaryOrigin(t *testing.T) {
	g := newRig(t, fixed(200, "secondary", "Cache-Control", "max-age=60"), nil)
	primary := newRig(t, fixed(503, "down"), nil)
	u, _ := url.Parse(g.origin.URL)
	e, err := New(Config{Behaviors: []Behavior{{PathPattern: "*", Origin: Origin{Primary: mustURL(t, primary.origin.URL), Secondary: u}}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	g.srv = startServer(t, e)
	g.expect(g.do("GET", "/a"), 200, "secondary", "Miss", 1)
	primary.origin.Close()
	g.expect(g.do("GET", "/b"), 200, "secondary", "Miss", 2)
}

func mustURL(t *testing.T, s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// An origin's body is read into a buffer of exactly its announced length; without a length, at most
// one byte past the limit is read, and the body kept in a buffer of its size, not the grown one; a
// body shorter than announced is an error.
func TestReadBody(t *testing.T) {
	resp := func(body string, length int64) *http.Response {
		return &http.Response{Body: io.NopCloser(strings.NewReader(body)), ContentLength: length}
	}
	body, err := readBody(resp(strings.Repeat("x", 3000), 3000), 10<<20)
	if err != nil || len(body) != 3000 || cap(body) != 3000 {
		t.Fatalf("announced 3000: len %d cap %d, %v; want both 3000", len(body), cap(body), err)
	}
	if body, err = readBody(resp(strings.Repeat("x", 50), -1), 10); err != nil || len(body) != 11 {
		t.Fatalf("unannounced 50 with limit 10: %d bytes, %v; want 11", len(body), err)
	}
	if body, err = readBody(resp(strings.Repeat("x", 5000), -1), 10<<20); err != nil || len(body) != 5000 || cap(body) != allocSize(5000) {
		t.Fatalf("unannounced 5000: len %d cap %d, %v; want 5000 in an allocation of %d", len(body), cap(body), err, allocSize(5000))
	}
	if _, err = readBody(resp("short", 100), 10<<20); err == nil {
		t.Fatal("a body shorter than announced was read without an error")
	}
}
