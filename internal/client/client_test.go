package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// replicaServer is an API replica that answers every request with code, counting them.
func replicaServer(t *testing.T, code int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		if code == http.StatusServiceUnavailable {
			_, _ = w.Write([]byte(`{"error":"etcd has no quorum: test"}`))
			return
		}
		_, _ = w.Write([]byte(`[]`))
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// deadAddress is a URL nothing listens on.
func deadAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func TestFailover(t *testing.T) {
	dead := deadAddress(t)
	busy, busyCalls := replicaServer(t, http.StatusServiceUnavailable)
	good, goodCalls := replicaServer(t, http.StatusOK)
	ctx := context.Background()

	// A read skips the replica that is down and the one without quorum, then sticks to the one
	// that answered.
	c := New(&Config{Server: dead, Servers: []string{dead, busy.URL, good.URL}, Token: "t"})
	if _, err := c.ListFleets(ctx); err != nil {
		t.Fatalf("GET through three replicas: %v", err)
	}
	if busyCalls.Load() != 1 || goodCalls.Load() != 1 {
		t.Fatalf("calls: busy %d, good %d; want 1 each", busyCalls.Load(), goodCalls.Load())
	}
	if _, err := c.ListFleets(ctx); err != nil || busyCalls.Load() != 1 || goodCalls.Load() != 2 {
		t.Fatalf("second GET: %v; calls busy %d, good %d: want it sent to the replica that answered", err, busyCalls.Load(), goodCalls.Load())
	}

	// A POST goes past a replica it never reached, but not past one that answered 503: once
	// sent, a non-idempotent request is not repeated.
	c = New(&Config{Server: dead, Servers: []string{dead, busy.URL, good.URL}, Token: "t"})
	_, err := c.Apply(ctx, nil)
	if !IsUnavailable(err) || !strings.Contains(err.Error(), "etcd has no quorum") {
		t.Fatalf("POST: %v; want the 503 of the second replica", err)
	}
	if busyCalls.Load() != 2 || goodCalls.Load() != 2 {
		t.Fatalf("POST calls: busy %d, good %d; want 2 and 2", busyCalls.Load(), goodCalls.Load())
	}

	// No replica can answer: the 503 says why, whichever replica was tried last.
	c = New(&Config{Server: busy.URL, Servers: []string{busy.URL, dead}, Token: "t"})
	if _, err := c.ListFleets(ctx); !IsUnavailable(err) {
		t.Fatalf("GET with no replica able to answer: %v; want 503", err)
	}
}

func TestConfigServers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	// A config from before servers existed still reads.
	if err := os.WriteFile(path, []byte("server: http://127.0.0.1:7443\ntoken: abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := LoadConfig(path)
	if err != nil || strings.Join(c.Endpoints(), ",") != "http://127.0.0.1:7443" {
		t.Fatalf("old config: %+v, %v", c, err)
	}
	// Replicas of the same control plane add themselves; another control plane replaces them.
	for _, s := range []string{"http://127.0.0.1:7444", "http://127.0.0.1:7443", "http://127.0.0.1:7445"} {
		if err := AddServer(path, s, "abc"); err != nil {
			t.Fatal(err)
		}
	}
	c, err = LoadConfig(path)
	if err != nil || c.Server != "http://127.0.0.1:7443" || strings.Join(c.Endpoints(), ",") != "http://127.0.0.1:7443,http://127.0.0.1:7444,http://127.0.0.1:7445" {
		t.Fatalf("after three replicas: %+v, %v", c, err)
	}
	if err := AddServer(path, "http://127.0.0.1:9000", "other"); err != nil {
		t.Fatal(err)
	}
	c, err = LoadConfig(path)
	if err != nil || strings.Join(c.Endpoints(), ",") != "http://127.0.0.1:9000" || c.Token != "other" {
		t.Fatalf("after another control plane: %+v, %v", c, err)
	}
	// servers alone is enough.
	if err := os.WriteFile(path, []byte("servers: [http://127.0.0.1:1, http://127.0.0.1:2]\ntoken: abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := LoadConfig(path); err != nil || c.Server != "http://127.0.0.1:1" {
		t.Fatalf("servers only: %+v, %v", c, err)
	}
	if err := os.WriteFile(path, []byte("token: abc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "server") {
		t.Fatalf("no server: %v; want an error naming server", err)
	}
}
