package edge

import (
	"net/url"
	"testing"
)

// An invalidation by pattern drops the matching paths (with any query) and no others; the figures
// count what the edge served and what it spared the origin.
func TestInvalidateByPattern(t *testing.T) {
	g := newRig(t, fixed(200, "x", "Cache-Control", "max-age=600"), nil)
	for _, p := range []string{"/img/a.png", "/img/b.png?v=2", "/css/site.css"} {
		g.do("GET", p)
	}
	g.expect(g.do("GET", "/img/a.png"), 200, "x", "Hit", 3)
	if n := g.edge.Invalidate([]string{"/img/*"}); n != 2 {
		t.Fatalf("Invalidate dropped %d URIs, want 2", n)
	}
	g.expect(g.do("GET", "/css/site.css"), 200, "x", "Hit", 3)
	g.expect(g.do("GET", "/img/b.png?v=2"), 200, "x", "Miss", 4)
	g.expect(g.do("GET", "/img/a.png"), 200, "x", "Miss", 5)
	st := g.edge.Stats()
	if st.Requests != 7 || st.Hits != 2 || st.Misses != 5 || st.OriginRequests != 5 || st.Invalidations != 2 || st.BytesServed != 7 {
		t.Fatalf("stats %+v", st)
	}
	if got, want := st.OriginOffload(), 1-5.0/7; got != want {
		t.Fatalf("origin offload %v, want %v", got, want)
	}
}

// Reconfigure sends the next miss to the new origin and keeps what is stored.
func TestReconfigureKeepsTheCache(t *testing.T) {
	g := newRig(t, fixed(200, "one", "Cache-Control", "max-age=600"), nil)
	g.do("GET", "/kept")
	other := newRig(t, fixed(200, "two", "Cache-Control", "max-age=600"), nil)
	u, _ := url.Parse(other.origin.URL)
	if err := g.edge.Reconfigure(Config{Behaviors: []Behavior{{PathPattern: "*", Origin: Origin{Primary: u}, Policy: Policy{QueryString: true}}}}); err != nil {
		t.Fatal(err)
	}
	g.expect(g.do("GET", "/kept"), 200, "one", "Hit", 1)
	if r := g.do("GET", "/new"); r.body != "two" || r.header.Get("X-Cache") != "Miss" {
		t.Fatalf("after Reconfigure: %q X-Cache %q, want the new origin's miss", r.body, r.header.Get("X-Cache"))
	}
	if err := g.edge.Reconfigure(Config{}); err == nil {
		t.Fatal("Reconfigure took a configuration without behaviors")
	}
}
