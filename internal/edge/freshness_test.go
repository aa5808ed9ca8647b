package edge

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// RFC 9111 section 4.2: a fresh stored response is served without contacting the origin, and once
// its age passes its freshness lifetime it is not.
func TestFreshnessMaxAge(t *testing.T) {
	g := newRig(t, fixed(200, "v1", "Cache-Control", "max-age=60"), nil)
	g.expect(g.do("GET", "/a"), 200, "v1", "Miss", 1)
	g.expect(g.do("GET", "/a"), 200, "v1", "Hit", 1)
	g.advance(61 * time.Second)
	g.expect(g.do("GET", "/a"), 200, "v1", "Miss", 2)
}

// Section 5.2.2.10: in a shared cache s-maxage overrides max-age (and Expires).
func TestFreshnessSMaxAgeOverridesMaxAge(t *testing.T) {
	g := newRig(t, fixed(200, "v", "Cache-Control", "max-age=600, s-maxage=10"), nil)
	g.do("GET", "/a")
	g.advance(11 * time.Second)
	g.expect(g.do("GET", "/a"), 200, "v", "Miss", 2)
}

// Section 5.3: Expires minus Date is the lifetime; an invalid Expires means already expired.
func TestFreshnessExpires(t *testing.T) {
	now := time.Now().UTC()
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", now.Format(http.TimeFormat))
		if r.URL.Path == "/bad" {
			w.Header().Set("Expires", "0")
		} else {
			w.Header().Set("Expires", now.Add(30*time.Second).Format(http.TimeFormat))
		}
		w.Write([]byte("x"))
	}, nil)
	g.do("GET", "/good")
	g.expect(g.do("GET", "/good"), 200, "x", "Hit", 1)
	g.advance(31 * time.Second)
	g.expect(g.do("GET", "/good"), 200, "x", "Miss", 2)
	g.do("GET", "/bad")
	g.expect(g.do("GET", "/bad"), 200, "x", "Miss", 4)
}

// Section 4.2.2: without explicit freshness, a heuristic from Last-Modified is allowed only for
// heuristically cacheable status codes: a 200 is kept, a 302 is not.
func TestFreshnessHeuristicOnlyForHeuristicStatus(t *testing.T) {
	lm := time.Now().Add(-100 * 24 * time.Hour).UTC().Format(http.TimeFormat)
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Last-Modified", lm)
		if r.URL.Path == "/moved" {
			w.Header().Set("Location", "/elsewhere")
			w.WriteHeader(http.StatusFound)
		}
		w.Write([]byte("x"))
	}, nil)
	g.do("GET", "/ok")
	g.expect(g.do("GET", "/ok"), 200, "x", "Hit", 1)
	g.advance(25 * time.Hour) // past the one-day bound of the heuristic
	g.expect(g.do("GET", "/ok"), 200, "x", "Miss", 2)

	noRedirect := g.client.CheckRedirect
	g.client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	defer func() { g.client.CheckRedirect = noRedirect }()
	g.do("GET", "/moved")
	g.expect(g.do("GET", "/moved"), 302, "x", "Miss", 4)
}

// The behavior's TTLs: DefaultTTL for a response that states no lifetime, MaxTTL capping one that
// does, MinTTL raising one that is shorter.
func TestFreshnessPolicyTTLs(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/long":
			w.Header().Set("Cache-Control", "max-age=86400")
		case "/short":
			w.Header().Set("Cache-Control", "max-age=1")
		}
		w.Write([]byte("x"))
	}, func(b *Behavior) {
		b.Policy.DefaultTTL = 20 * time.Second
		b.Policy.MinTTL = 5 * time.Second
		b.Policy.MaxTTL = 60 * time.Second
	})
	for _, p := range []string{"/none", "/long", "/short"} {
		g.do("GET", p)
	}
	g.advance(4 * time.Second)
	g.expect(g.do("GET", "/short"), 200, "x", "Hit", 3) // MinTTL 5s beats max-age=1
	g.advance(17 * time.Second)
	g.expect(g.do("GET", "/none"), 200, "x", "Miss", 4) // DefaultTTL 20s passed
	g.expect(g.do("GET", "/long"), 200, "x", "Hit", 4)
	g.advance(40 * time.Second)
	g.expect(g.do("GET", "/long"), 200, "x", "Miss", 5) // MaxTTL 60s passed
}

// Section 5.1 and 4.2.3: the Age sent is the stored response's current age, counting the Age the
// origin sent, and that age counts against its lifetime.
func TestAgeHeader(t *testing.T) {
	g := newRig(t, fixed(200, "x", "Cache-Control", "max-age=60", "Age", "30"), nil)
	r := g.do("GET", "/a")
	if age, _ := strconv.Atoi(r.header.Get("Age")); age < 30 || age > 31 {
		t.Fatalf("Age on the miss = %q, want 30", r.header.Get("Age"))
	}
	g.advance(20 * time.Second)
	r = g.do("GET", "/a")
	if age, _ := strconv.Atoi(r.header.Get("Age")); age < 50 || age > 51 {
		t.Fatalf("Age after 20s = %q, want 50", r.header.Get("Age"))
	}
	g.advance(11 * time.Second) // 61s old: stale although only 31s in the edge
	g.expect(g.do("GET", "/a"), 200, "x", "Miss", 2)
}

// Section 5.2.1: the request's max-age and min-fresh ask for a fresher response; only-if-cached
// forbids the origin.
func TestRequestDirectives(t *testing.T) {
	g := newRig(t, fixed(200, "x", "Cache-Control", "max-age=60"), nil)
	g.do("GET", "/a")
	g.advance(10 * time.Second)
	g.expect(g.do("GET", "/a", "Cache-Control", "max-age=5"), 200, "x", "Miss", 2)
	g.advance(10 * time.Second)
	g.expect(g.do("GET", "/a", "Cache-Control", "min-fresh=55"), 200, "x", "Miss", 3)
	g.expect(g.do("GET", "/a", "Cache-Control", "only-if-cached"), 200, "x", "Hit", 3)
	if r := g.do("GET", "/b", "Cache-Control", "only-if-cached"); r.status != http.StatusGatewayTimeout || g.hits.Load() != 3 {
		t.Fatalf("only-if-cached miss: %d, origin hits %d; want 504 without the origin", r.status, g.hits.Load())
	}
}

// Cache-Control's members are read case-insensitively and unquoted; a directive given twice is
// read with its first value, across field lines too; a request's Pragma: no-cache stands for
// no-cache only without Cache-Control (RFC 9111 sections 5.2 and 5.4).
func TestCacheControlDirectives(t *testing.T) {
	h := http.Header{"Cache-Control": {`Max-Age=60, private="Set-Cookie, X", max-age=5`, "s-maxage=7, MAX-AGE=9"}}
	d := parseCacheControl(h)
	if v, ok := d.get("max-age"); !ok || v != "60" {
		t.Errorf("max-age = %q, %v; want the first, 60", v, ok)
	}
	if v, _ := d.get("private"); v != "Set-Cookie, X" {
		t.Errorf("private = %q, want it unquoted", v)
	}
	if s, ok := d.seconds("s-maxage"); !ok || s != 7*time.Second {
		t.Errorf("s-maxage = %v, %v; want 7s from the second line", s, ok)
	}
	if d.has("no-cache") || parseCacheControl(http.Header{}) != nil {
		t.Error("a directive not sent reads as present, or a message without Cache-Control has some")
	}
	if !requestDirectives(http.Header{"Pragma": {"no-cache"}}).has("no-cache") {
		t.Error("Pragma: no-cache without Cache-Control is not read as no-cache")
	}
	if requestDirectives(http.Header{"Pragma": {"no-cache"}, "Cache-Control": {"max-age=5"}}).has("no-cache") {
		t.Error("Pragma: no-cache is read despite a Cache-Control")
	}
}
