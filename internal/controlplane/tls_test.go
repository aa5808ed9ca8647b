package controlplane_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/localca"
)

// A fleet listener with tls.localCA serves HTTPS, HTTP/2 by ALPN, with a certificate that
// clients trusting herd up's CA accept; a listener whose certificate files do not load is refused
// at apply with the field, and changes nothing.
func TestListenerTLSLocalCA(t *testing.T) {
	c, cl := inProcessWith(t, func(o *controlplane.Options) { o.LBAddress = "127.0.0.1" })
	port := freeport.TCP(t)
	applyManifest(t, cl, fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: secure}
spec:
  image: demo
  replicas: {min: 1, max: 3, desired: 1}
  listeners:
  - {name: https, port: %d, instancePort: 30080, tls: {localCA: true}}
  regions:
  - {name: local, provider: fake, options: {bootDelay: 100ms, serve: "30080"}}
`, port))

	caPEM, err := os.ReadFile(localca.CertFile(localca.Dir(filepath.Join(c.dir, "data"))))
	if err != nil {
		t.Fatalf("herd up's CA certificate: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the CA certificate is no PEM certificate")
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "localhost"}, ForceAttemptHTTP2: true}}
	c.waitFor(30*time.Second, func() string {
		resp, err := client.Get(fmt.Sprintf("https://127.0.0.1:%d/", port))
		if err != nil {
			return err.Error()
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), "hello from secure-") {
			return fmt.Sprintf("%s %q, want 200 from an instance", resp.Status, body)
		}
		if resp.Proto != "HTTP/2.0" {
			return "answered over " + resp.Proto + ", want HTTP/2.0 by ALPN"
		}
		return ""
	})

	// Certificate files that do not load: refused at apply, naming the field; the fleet is unchanged.
	dir := t.TempDir()
	bad := filepath.Join(dir, "tls.crt")
	if err := os.WriteFile(bad, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	docs, err := v1alpha1.Decode(fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: secure}
spec:
  image: demo
  replicas: {min: 1, max: 3, desired: 2}
  listeners:
  - {name: https, port: %d, instancePort: 30080, tls: {certFile: %s, keyFile: %s}}
  regions:
  - {name: local, provider: fake, options: {bootDelay: 100ms, serve: "30080"}}
`, port, bad, bad))
	if err != nil {
		t.Fatal(err)
	}
	f := *docs[0].Object.(*v1alpha1.Fleet)
	_, err = cl.Apply(context.Background(), []v1alpha1.Fleet{f})
	if err == nil || !strings.Contains(err.Error(), "spec.listeners[0].tls") || !strings.Contains(err.Error(), "do not load") {
		t.Fatalf("apply with certificate files that do not load: %v, want an error naming spec.listeners[0].tls", err)
	}
	got, err := cl.GetFleet(context.Background(), "secure")
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Listeners[0].TLS == nil || !got.Spec.Listeners[0].TLS.LocalCA || *got.Spec.Replicas.Desired != 1 {
		t.Errorf("a refused apply changed the fleet: %+v desired %d", got.Spec.Listeners[0].TLS, *got.Spec.Replicas.Desired)
	}
}
