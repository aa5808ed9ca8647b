package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// noQuorum is a store that cannot answer, as etcd without quorum.
type noQuorum struct{ store.Store }

var errNoQuorum = fmt.Errorf("etcd has no quorum: start the members that are down: %w", store.ErrUnavailable)

func (noQuorum) Get(context.Context, string, string) (store.Record, error) {
	return store.Record{}, errNoQuorum
}
func (noQuorum) List(context.Context, string) ([]store.Record, int64, error) {
	return nil, 0, errNoQuorum
}
func (noQuorum) Txn(context.Context, ...store.Op) ([]store.Record, error) { return nil, errNoQuorum }

// TestStoreUnavailable: whatever the request, a store that cannot answer is the API's 503 with
// the store's reason, and a Retry-After.
func TestStoreUnavailable(t *testing.T) {
	srv := httptest.NewServer(New(Options{Store: noQuorum{memory.New()}, Token: token, DefaultProvider: "fake", Providers: []string{"fake"}}))
	t.Cleanup(srv.Close)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/fleets", ""},
		{http.MethodGet, "/v1/fleets/web", ""},
		{http.MethodGet, "/v1/instances", ""},
		{http.MethodPut, "/v1/fleets/web/scale", `{"replicas": 2}`},
		{http.MethodPost, "/v1/apply", fleetJSON("web", nil)},
		{http.MethodDelete, "/v1/fleets/web", ""},
	} {
		code, body := call(t, srv, token, c.method, c.path, c.body)
		if code != http.StatusServiceUnavailable || !strings.Contains(body, "etcd has no quorum") {
			t.Errorf("%s %s: %d %s; want 503 saying etcd has no quorum", c.method, c.path, code, body)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/fleets", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Retry-After") == "" {
		t.Errorf("503 without Retry-After")
	}
}
