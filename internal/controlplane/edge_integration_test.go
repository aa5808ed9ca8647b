package controlplane_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/freeport"
)

// countingOrigin answers every path with its name and the path, cacheable for ten minutes.
func countingOrigin(t *testing.T, name string) (*httptest.Server, *atomic.Int64) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprintf(w, "%s %s", name, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// herd apply takes a Distribution, and herd up runs its edge location: served on its listener
// to a real HTTP client, listed by herd get distributions, invalidated by herd edge invalidate,
// counted by herd edge stats and /metrics, reconfigured in place by a second apply (the cache
// kept, a new listener and origin), and stopped by herd delete. A listener port a fleet holds is
// refused at apply, naming the field, and nothing is applied.
func TestIntegrationDistributionApplied(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	c := newCluster(t)
	c.up()
	one, oneHits := countingOrigin(t, "one")
	two, twoHits := countingOrigin(t, "two")
	p1, p2 := freeport.TCP(t), freeport.TCP(t)
	file := filepath.Join(c.dir, "dist.yaml")
	write := func(listeners, origin string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Distribution
metadata: {name: site}
spec:
  listeners: [%s]
  origins: [{name: o, url: %q}]
  behaviors: [{pathPattern: "*", origin: o}]
`, listeners, origin)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	herd := func(args ...string) string {
		t.Helper()
		out, err := c.herd(args...)
		if err != nil {
			t.Fatalf("herd %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return out
	}
	get := func(port int, path string) (string, string) {
		t.Helper()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d%s", port, path))
		if err != nil {
			t.Fatalf("GET %s on %d: %v", path, port, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("X-Cache"), string(b)
	}
	expect := func(port int, path, xcache, body string) {
		t.Helper()
		if x, b := get(port, path); x != xcache || b != body {
			t.Fatalf("GET %s on %d: X-Cache %q body %q, want %q %q", path, port, x, b, xcache, body)
		}
	}

	write(fmt.Sprintf("{port: %d}", p1), one.URL)
	if out := herd("apply", "-f", file); !strings.Contains(out, "distribution/site created") {
		t.Fatalf("herd apply said:\n%s", out)
	}
	c.waitFor(10*time.Second, func() string {
		out, _ := c.herd("get", "distributions")
		if !strings.Contains(out, fmt.Sprintf("127.0.0.1:%d", p1)) || !strings.Contains(out, "Serving") {
			return "herd get distributions:\n" + out
		}
		return ""
	})
	expect(p1, "/a", "Miss", "one /a")
	expect(p1, "/a", "Hit", "one /a")
	expect(p1, "/b", "Miss", "one /b")
	if n := oneHits.Load(); n != 2 {
		t.Fatalf("origin got %d requests, want 2", n)
	}

	if out := herd("edge", "invalidate", "site", "/a*"); !strings.Contains(out, "1 objects dropped") {
		t.Fatalf("herd edge invalidate said:\n%s", out)
	}
	expect(p1, "/a", "Miss", "one /a")
	expect(p1, "/b", "Hit", "one /b")
	out := herd("edge", "stats", "site", "-o", "json")
	for _, want := range []string{`"requests": 5`, `"hits": 2`, `"misses": 3`, `"originRequests": 3`, `"invalidations": 1`, `"originOffload": 0.4`} {
		if !strings.Contains(out, want) {
			t.Errorf("herd edge stats lacks %s:\n%s", want, out)
		}
	}
	cfg, err := client.LoadConfig(filepath.Join(c.dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	_, metrics, err := c.scrape(cfg.Token)
	if err != nil || !strings.Contains(metrics, `herd_edge_hits_total{distribution="site"} 2`) {
		t.Fatalf("/metrics (%v) lacks the edge's hits:\n%.3000s", err, metrics)
	}

	// A second listener and another origin: the location is reconfigured, not restarted, so
	// what it stored is still there, on both listeners.
	write(fmt.Sprintf("{port: %d}, {port: %d}", p1, p2), two.URL)
	if out := herd("apply", "-f", file); !strings.Contains(out, "distribution/site configured") {
		t.Fatalf("herd apply said:\n%s", out)
	}
	c.waitFor(10*time.Second, func() string {
		if _, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", p2)); err != nil {
			return err.Error()
		}
		return ""
	})
	expect(p2, "/a", "Hit", "one /a")
	expect(p1, "/c", "Miss", "two /c")
	if oneHits.Load() != 3 {
		t.Fatalf("the old origin got %d requests, want 3", oneHits.Load())
	}
	if twoHits.Load() != 2 { // the readiness probe's / and /c
		t.Fatalf("the new origin got %d requests, want 2", twoHits.Load())
	}

	// A listener on a port a fleet's load balancer holds is refused, and nothing changes.
	c.apply(fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: web}
spec:
  image: demo
  replicas: {min: 0, max: 1, desired: 0}
  listeners: [{port: %d, instancePort: 30080}]
`, freeport.TCP(t)))
	fleets, err := client.New(cfg).ListFleets(t.Context())
	if err != nil || len(fleets) != 1 {
		t.Fatalf("fleets: %v %v", fleets, err)
	}
	write(fmt.Sprintf("{port: %d}", fleets[0].Spec.Listeners[0].Port), two.URL)
	out, err = c.herd("apply", "-f", file)
	if err == nil || !strings.Contains(out, "spec.listeners[0].port") || !strings.Contains(out, `fleet "web"`) {
		t.Fatalf("herd apply of a clashing port: %v\n%s", err, out)
	}
	expect(p2, "/c", "Hit", "two /c")

	herd("delete", "distribution", "site")
	c.waitFor(10*time.Second, func() string {
		if _, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", p1)); err == nil {
			return "the listener still serves after delete"
		}
		return ""
	})
	if out, _ := c.herd("get", "distributions"); !strings.Contains(out, "No distributions found") {
		t.Fatalf("herd get distributions after delete:\n%s", out)
	}
}
