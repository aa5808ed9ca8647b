package lb

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// backend is a real HTTP server on loopback that names itself in every answer.
type backend struct {
	name string
	srv  *httptest.Server
	hits atomic.Int64
	down atomic.Bool // /healthz answers 500 while set
}

func (b *backend) addr() string { return b.srv.Listener.Addr().String() }

// kill stops the backend the way a crashed process does: new connections are refused and open ones drop.
func (b *backend) kill() {
	b.srv.Listener.Close()
	b.srv.CloseClientConnections()
}

func newBackend(t testing.TB, name string, h http.HandlerFunc) *backend {
	t.Helper()
	b := &backend{name: name}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			if b.down.Load() {
				w.WriteHeader(http.StatusInternalServerError)
			}
			return
		}
		b.hits.Add(1)
		w.Header().Set("X-Backend", name)
		if h != nil {
			h(w, r)
			return
		}
		io.WriteString(w, name)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func newBackends(t testing.TB, n int, h http.HandlerFunc) []*backend {
	out := make([]*backend, n)
	for i := range out {
		out[i] = newBackend(t, fmt.Sprintf("b%d", i), h)
	}
	return out
}

// targets makes one target per backend, with IDs equal to the backend names.
func targets(bs ...*backend) []Target {
	out := make([]Target, len(bs))
	for i, b := range bs {
		out[i] = Target{ID: b.name, Address: b.addr()}
	}
	return out
}

// httpListener is a listener on a fresh loopback port with fast health checks.
func httpListener(groups ...TargetGroup) Listener {
	return Listener{
		Name: "web/http", Fleet: "web", Address: "127.0.0.1:0",
		HealthCheck: HealthCheck{Path: "/healthz", Interval: Duration(100 * time.Millisecond)},
		Groups:      groups,
	}
}

// testLogger sends logs to the test log, so they show only when a test fails.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// engines are the HTTP/1.x engines every behaviour test runs against.
var engines = []Engine{EngineFast, EngineNetHTTP}

// forEachEngine runs test once per engine, as a subtest named after it.
func forEachEngine(t *testing.T, test func(t *testing.T, e Engine)) {
	for _, e := range engines {
		t.Run(strings.ReplaceAll(string(e), "/", "-"), func(t *testing.T) { test(t, e) })
	}
}

// startLB applies cfg, starts the load balancer with engine e and stops it when the test ends.
func startLB(t testing.TB, e Engine, cfg Config) *LB {
	t.Helper()
	return startLBWith(t, e, cfg, testLogger(t))
}

func startLBWith(t testing.TB, e Engine, cfg Config, log *slog.Logger) *LB {
	t.Helper()
	lb := New(Options{Logger: log, Engine: e})
	if err := lb.Apply(cfg); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- lb.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Start: %v", err)
			}
		case <-time.After(40 * time.Second):
			t.Errorf("load balancer did not stop")
		}
	})
	return lb
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitHealthy waits until n targets are healthy.
func waitHealthy(t testing.TB, lb *LB, n int) {
	t.Helper()
	waitFor(t, 10*time.Second, fmt.Sprintf("%d healthy targets", n), func() bool {
		return countState(lb, StateHealthy) == n
	})
}

func countState(lb *LB, s State) int {
	n := 0
	for _, h := range lb.Health() {
		if h.State == s {
			n++
		}
	}
	return n
}

func stateOf(lb *LB, id string) State {
	for _, h := range lb.Health() {
		if h.ID == id {
			return h.State
		}
	}
	return ""
}

func url(lb *LB, path string) string {
	return "http://" + lb.Addr("web/http").String() + path
}

// client is a keep-alive client with enough idle connections for the tests' concurrency.
func newClient() *http.Client {
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: 64, DisableCompression: true},
	}
}

// get does a GET and returns the status, the answering backend and the body.
func get(t testing.TB, c *http.Client, u string, hdr ...string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp.StatusCode, resp.Header.Get("X-Backend"), string(body)
}

// rawRequest sends raw bytes on a fresh connection and returns everything read until the server closes
// the connection or one second of silence.
func rawRequest(t testing.TB, addr, raw string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	c.SetReadDeadline(time.Now().Add(time.Second))
	io.Copy(&buf, c)
	return buf.String()
}

// logBuffer collects log output for tests that check a line was logged.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// writeCert writes a self-signed certificate for 127.0.0.1 and returns its files and a pool trusting it.
func writeCert(t testing.TB) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	return writeCertSerial(t, 1)
}

// writeCertSerial is writeCert with the certificate's serial number.
func writeCertSerial(t testing.TB, serial int64) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: "herd-lb-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
