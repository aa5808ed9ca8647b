package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"herd.dev/herd/internal/localca"
)

// herd edge serves a Distribution from a file: a cleartext and a local-CA HTTPS listener in front
// of a URL origin, a miss then a hit with one origin request, and the counters on /metrics.
func TestEdgeServesDistribution(t *testing.T) {
	var originHits atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		originHits.Add(1)
		w.Header().Set("Cache-Control", "max-age=60")
		io.WriteString(w, "from origin")
	}))
	defer origin.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "d.yaml")
	os.WriteFile(file, []byte(`apiVersion: herd.dev/v1alpha1
kind: Distribution
metadata: {name: site}
spec:
  listeners: [{port: 1}, {port: 2, tls: {localCA: true}}]
  origins: [{name: o, url: "`+origin.URL+`"}]
  behaviors: [{pathPattern: "*", origin: o}]
`), 0o600)
	d, err := readDistribution(file)
	if err != nil {
		t.Fatal(err)
	}
	for i := range d.Spec.Listeners {
		d.Spec.Listeners[i].Port = 0 // any free port
	}
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan map[string]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- runEdge(ctx, &globals{}, slog.New(slog.DiscardHandler), d, edgeOptions{metricsAddr: "127.0.0.1:0", dataDir: dir,
			ready: func(a map[string]string) { addrs <- a }})
	}()
	var a map[string]string
	select {
	case a = <-addrs:
	case err := <-done:
		t.Fatalf("herd edge stopped: %v", err)
	}
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("herd edge: %v", err)
		}
	}()
	get := func(c *http.Client, u string) (string, string) {
		t.Helper()
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.Header.Get("X-Cache"), string(b)
	}
	if x, body := get(http.DefaultClient, "http://"+a["http-1"]+"/x"); x != "Miss" || body != "from origin" {
		t.Fatalf("first GET: X-Cache %q body %q", x, body)
	}
	pem, err := os.ReadFile(localca.CertFile(localca.Dir(dir)))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	tlsClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	if x, body := get(tlsClient, "https://"+a["https-2"]+"/x"); x != "Hit" || body != "from origin" {
		t.Fatalf("GET over HTTPS: X-Cache %q body %q", x, body)
	}
	if originHits.Load() != 1 {
		t.Fatalf("origin received %d requests, want 1", originHits.Load())
	}
	_, metrics := get(http.DefaultClient, "http://"+a["metrics"]+"/metrics")
	for _, want := range []string{`herd_edge_hits_total{distribution="site"} 1`, `herd_edge_misses_total{distribution="site"} 1`, `herd_edge_origin_requests_total{distribution="site"} 1`, `herd_edge_bytes_served_total{distribution="site"} 22`,
		`herd_edge_memory_entries{distribution="site"} 1`, "go_memstats_heap_inuse_bytes ", "process_resident_memory_bytes "} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, metrics)
		}
	}
}

// herd edge serves exactly one Distribution, and says so of a file without one.
func TestReadDistributionNeedsExactlyOne(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f.yaml")
	os.WriteFile(file, []byte("apiVersion: herd.dev/v1alpha1\nkind: Fleet\nmetadata: {name: a}\nspec: {image: x}\n"), 0o600)
	if _, err := readDistribution(file); err == nil || !strings.Contains(err.Error(), "0 Distributions") {
		t.Fatalf("a file without a Distribution: %v", err)
	}
}
