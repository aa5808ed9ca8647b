package client

import (
	"context"
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// TestUnixSocketServers: a server URL unix:///path reaches the API on that socket, with the
// token, and two sockets are two servers (no connection of one is reused for the other).
func TestUnixSocketServers(t *testing.T) {
	serve := func(version string) string {
		path := filepath.Join(t.TempDir(), "api.sock")
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer t" || r.URL.Path != "/v1/version" {
				http.Error(w, `{"error":"unexpected"}`, http.StatusUnauthorized)
				return
			}
			_, _ = w.Write([]byte(`{"version":"` + version + `"}`))
		})}
		go func() { _ = srv.Serve(ln) }()
		t.Cleanup(func() { srv.Close() })
		return unixScheme + path
	}
	one, two := serve("one"), serve("two")
	for i := range 2 { // the second round reuses the pooled connections
		for server, want := range map[string]string{one: "one", two: "two"} {
			got, err := New(&Config{Server: server, Token: "t"}).Version(context.Background())
			if err != nil || got != want {
				t.Fatalf("round %d: version from %s = %q, %v; want %q", i, server, got, err, want)
			}
		}
	}
	if _, err := New(&Config{Server: unixScheme + filepath.Join(t.TempDir(), "none.sock"), Token: "t"}).Version(context.Background()); err == nil {
		t.Fatal("a socket nobody listens on answered")
	}
}
