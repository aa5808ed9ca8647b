package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/edge"
	"herd.dev/herd/internal/edgeplane"
	"herd.dev/herd/internal/store/memory"
)

// fixedEdges is one replica's edge locations, with fixed figures.
type fixedEdges map[string]edge.Stats

func (f fixedEdges) Distributions(context.Context) ([]*v1alpha1.Distribution, error) { return nil, nil }
func (f fixedEdges) Status(string) v1alpha1.DistributionStatus                       { return v1alpha1.DistributionStatus{} }
func (f fixedEdges) Stats(name string) (edge.Stats, bool) {
	st, ok := f[name]
	return st, ok
}
func (f fixedEdges) Invalidate(context.Context, string, []string) (edgeplane.InvalidationResult, error) {
	return edgeplane.InvalidationResult{}, nil
}

// A distribution's stats add up the edge locations of every replica, read over their APIs with the
// shared token; a replica without a location of it adds nothing, one that cannot be reached is
// named; scope=local is the replica's own figures.
func TestEdgeStatsAddUpReplicas(t *testing.T) {
	replica := func(e fixedEdges, peers ...string) *httptest.Server {
		srv := httptest.NewServer(New(Options{Store: memory.New(), Token: token, Edges: e,
			Peers: func(context.Context) ([]string, error) { return peers, nil }}))
		t.Cleanup(srv.Close)
		return srv
	}
	b := replica(fixedEdges{"site": {Requests: 10, Hits: 8, Misses: 2, OriginRequests: 2}})
	c := replica(fixedEdges{}) // runs no location of site
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	a := replica(fixedEdges{"site": {Requests: 30, Hits: 12, Misses: 18, OriginRequests: 6, Coalesced: 12}}, b.URL, c.URL, down.URL)

	code, body := call(t, a, token, "GET", "/v1/distributions/site/stats", "")
	var st EdgeStats
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil {
		t.Fatalf("stats: %d %s", code, body)
	}
	want := edge.Stats{Requests: 40, Hits: 20, Misses: 20, OriginRequests: 8, Coalesced: 12}
	if st.Stats != want || st.Locations != 2 || st.HitRatio != 0.5 || st.OriginOffload != 0.8 {
		t.Fatalf("stats: %+v, want %+v from 2 locations, hit ratio 0.5, offload 0.8", st, want)
	}
	if len(st.Unreached) != 1 || !strings.HasPrefix(st.Unreached[0], down.URL) {
		t.Fatalf("unreached %q, want the stopped replica named", st.Unreached)
	}

	code, body = call(t, a, token, "GET", "/v1/distributions/site/stats?scope=local", "")
	if code != http.StatusOK || json.Unmarshal([]byte(body), &st) != nil || st.Stats.Requests != 30 || st.Locations != 1 {
		t.Fatalf("scope=local: %d %s, want a's own 30 requests", code, body)
	}
	if code, body := call(t, c, token, "GET", "/v1/distributions/site/stats", ""); code != http.StatusNotFound {
		t.Fatalf("a replica without peers nor a location: %d %s, want 404", code, body)
	}
}
