package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/localca"
)

// checkEdgeTLS puts a Distribution in front of fleet, which serves on real instances, with an HTTPS
// listener whose certificate comes from herd's local CA, and checks through it, over HTTP/2 with a
// client that trusts only that CA: a miss, then a hit with the same instance's answer; herd edge
// invalidate makes the next request a miss again; herd edge stats counts what happened; herd
// delete distribution stops the listener.
func (e *env) checkEdgeTLS(fleet string) {
	t := e.t
	t.Helper()
	name, port := fleet+"-edge", freeport.TCP(t)
	yaml := fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Distribution
metadata: {name: %s}
spec:
  listeners: [{port: %d, tls: {localCA: true}}]
  origins: [{name: web, fleet: %s}]
  behaviors: [{pathPattern: "*", origin: web, cachePolicy: {defaultTTL: 5m}}]
`, name, port, fleet)
	if out, err := e.applyFile(name, yaml); err != nil {
		t.Fatalf("herd apply the distribution: %v\n%s", err, out)
	}
	pem, err := os.ReadFile(localca.CertFile(localca.Dir(e.data)))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("https://127.0.0.1:%d/", port)
	type answer struct{ proto, xcache, instance string }
	ask := func() (answer, error) {
		resp, err := client.Get(url)
		if err != nil {
			return answer{}, err
		}
		a := answer{proto: resp.Proto, xcache: resp.Header.Get("X-Cache")}
		a.instance, err = helloInstance(resp)
		return a, err
	}
	// The location starts once herd up's watch of the store delivers the distribution.
	var first answer
	e.waitFor(30*time.Second, 200*time.Millisecond, func() string {
		if first, err = ask(); err != nil {
			return "GET " + url + ": " + err.Error()
		}
		return ""
	})
	if first.proto != "HTTP/2.0" || first.xcache != "Miss" {
		t.Fatalf("first request through the edge: %+v, want HTTP/2.0 and a Miss", first)
	}
	second, err := ask()
	if err != nil || second.xcache != "Hit" || second.instance != first.instance {
		t.Fatalf("second request through the edge: %+v %v, want a Hit with %s's answer", second, err, first.instance)
	}
	if out, err := e.herd("edge", "invalidate", name, "/*"); err != nil || !strings.Contains(out, "1 objects dropped") {
		t.Fatalf("herd edge invalidate: %v\n%s", err, out)
	}
	if third, err := ask(); err != nil || third.xcache != "Miss" {
		t.Fatalf("request after the invalidation: %+v %v, want a Miss", third, err)
	}
	out, err := e.herd("edge", "stats", name, "-o", "json")
	var st apiserver.EdgeStats
	if err != nil || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("herd edge stats: %v\n%s", err, out)
	}
	if s := st.Stats; s.Hits != 1 || s.Misses < 2 || s.OriginRequests != s.Misses || s.Invalidations != 1 {
		t.Fatalf("herd edge stats: %+v, want 1 hit, 2 misses or more (each an origin request) and 1 invalidation", s)
	}
	if out, err := e.herd("delete", "distribution", name); err != nil {
		t.Fatalf("herd delete distribution: %v\n%s", err, out)
	}
	e.waitFor(30*time.Second, 200*time.Millisecond, func() string {
		if resp, err := client.Get(url); err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			client.CloseIdleConnections()
			return "the edge still answers after herd delete distribution"
		}
		return ""
	})
}
