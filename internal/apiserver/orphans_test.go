package apiserver

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store/memory"
)

// GET /v1/orphans answers the controller's orphans behind the token, and 503 naming where to ask
// on a replica that does not lead.
func TestOrphansAPI(t *testing.T) {
	found := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var notLeading atomic.Bool
	srv := httptest.NewServer(New(Options{Store: memory.New(), Token: token,
		Orphans: func() ([]v1alpha1.Orphan, error) {
			if notLeading.Load() {
				return nil, ErrNotLeading
			}
			return []v1alpha1.Orphan{{Name: "bench-1-0", Provider: "local", Region: "bench", State: "Ready", Why: "it has no herd.dev/fleet label", FoundAt: found}}, nil
		},
	}))
	t.Cleanup(srv.Close)
	want := `[{"name":"bench-1-0","provider":"local","region":"bench","state":"Ready","why":"it has no herd.dev/fleet label","foundAt":"2026-01-02T03:04:05Z"}]` + "\n"
	if code, body := call(t, srv, token, http.MethodGet, "/v1/orphans", ""); code != http.StatusOK || body != want {
		t.Errorf("GET /v1/orphans: %d %s, want %s", code, body, want)
	}
	if code, _ := call(t, srv, "", http.MethodGet, "/v1/orphans", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/orphans without the token: %d, want 401", code)
	}
	notLeading.Store(true)
	if code, body := call(t, srv, token, http.MethodGet, "/v1/orphans", ""); code != http.StatusServiceUnavailable || !strings.Contains(body, "herd version") {
		t.Errorf("GET /v1/orphans on a replica that does not lead: %d %s, want 503 saying where to ask", code, body)
	}
}
