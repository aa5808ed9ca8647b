package apiserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

const token = "0123456789abcdef0123456789abcdef"

func newServer(t *testing.T) (*httptest.Server, store.Store) {
	st := memory.New()
	srv := httptest.NewServer(New(Options{Store: st, Token: token, DefaultProvider: "fake", Providers: []string{"fake"}}))
	t.Cleanup(srv.Close)
	return srv, st
}

func call(t *testing.T, srv *httptest.Server, tok, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}

func fleetJSON(name string, mutate func(*v1alpha1.Fleet)) string {
	f := v1alpha1.Fleet{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: name},
		Spec:     v1alpha1.FleetSpec{Image: "img"},
	}
	if mutate != nil {
		mutate(&f)
	}
	data, _ := json.Marshal(ApplyRequest{Fleets: []v1alpha1.Fleet{f}})
	return string(data)
}

func TestAuthentication(t *testing.T) {
	srv, _ := newServer(t)
	for _, tc := range []struct{ name, tok string }{{"missing", ""}, {"wrong", "nope"}, {"prefix", token[:10]}} {
		t.Run(tc.name, func(t *testing.T) {
			for _, path := range []string{"/v1/fleets", "/v1/version", "/nothing"} {
				code, body := call(t, srv, tc.tok, "GET", path, "")
				if code != http.StatusUnauthorized || strings.TrimSpace(body) != "Unauthorized" {
					t.Fatalf("GET %s: %d %q, want a bare 401", path, code, body)
				}
			}
		})
	}
	if code, _ := call(t, srv, token, "GET", "/v1/version", ""); code != http.StatusOK {
		t.Fatalf("right token: %d", code)
	}
}

func TestApplyValidatesAndStoresNothingOnError(t *testing.T) {
	srv, st := newServer(t)
	bad := fleetJSON("web", func(f *v1alpha1.Fleet) {
		f.Spec.Replicas = v1alpha1.Replicas{Min: new(int32(5)), Max: new(int32(3))}
		f.Spec.Regions = []v1alpha1.Region{{Name: "eu", Provider: "aws"}}
	})
	code, body := call(t, srv, token, "POST", "/v1/apply", bad)
	if code != http.StatusUnprocessableEntity {
		t.Fatalf("bad fleet: %d %s", code, body)
	}
	for _, want := range []string{"spec.replicas.min", "must be <= spec.replicas.max (got 5 > 3)", "spec.regions[0].provider", `provider \"aws\" is not running`} {
		if !strings.Contains(body, want) {
			t.Errorf("response lacks %q: %s", want, body)
		}
	}
	// Two fleets, the second invalid: neither is stored.
	var req ApplyRequest
	_ = json.Unmarshal([]byte(fleetJSON("good", nil)), &req)
	var req2 ApplyRequest
	_ = json.Unmarshal([]byte(fleetJSON("Bad_Name", nil)), &req2)
	req.Fleets = append(req.Fleets, req2.Fleets...)
	both, _ := json.Marshal(req)
	if code, body := call(t, srv, token, "POST", "/v1/apply", string(both)); code != http.StatusUnprocessableEntity {
		t.Fatalf("mixed apply: %d %s", code, body)
	}
	recs, _, _ := st.List(context.Background(), store.Fleets)
	if len(recs) != 0 {
		t.Fatalf("%d fleets stored after refused applies", len(recs))
	}
	if code, body := call(t, srv, token, "POST", "/v1/apply", `{"fleets": [], "extra": 1}`); code != http.StatusBadRequest {
		t.Fatalf("unknown field in request: %d %s", code, body)
	}
}

func TestApplyCreatesConfiguresAndKeepsStatus(t *testing.T) {
	srv, st := newServer(t)
	if code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", nil)); code != 200 || !strings.Contains(body, `"created"`) {
		t.Fatalf("create: %d %s", code, body)
	}
	if _, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", nil)); !strings.Contains(body, `"unchanged"`) {
		t.Fatalf("re-apply: %s", body)
	}
	// The controller writes status; a later apply must keep it and bump the generation.
	f, _ := store.GetObject[v1alpha1.Fleet](context.Background(), st, store.Fleets, "web")
	f.Status.ReadyReplicas = 1
	op, _ := store.PutOp(store.Fleets, f)
	if _, err := st.Txn(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	if _, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) { f.Spec.Image = "img-2" })); !strings.Contains(body, `"configured"`) {
		t.Fatalf("changed apply: %s", body)
	}
	f, _ = store.GetObject[v1alpha1.Fleet](context.Background(), st, store.Fleets, "web")
	if f.Metadata.Generation != 2 || f.Status.ReadyReplicas != 1 || f.Spec.Image != "img-2" || f.Spec.Regions[0].Provider != "fake" {
		t.Fatalf("after configure: generation %d, status %+v, spec %+v", f.Metadata.Generation, f.Status, f.Spec)
	}
}

func TestScaleBounds(t *testing.T) {
	srv, _ := newServer(t)
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) {
		f.Spec.Replicas = v1alpha1.Replicas{Min: new(int32(1)), Max: new(int32(5))}
	}))
	tests := []struct {
		replicas int
		code     int
		want     string
	}{
		{4, 200, ""},
		{6, 422, "above spec.replicas.max (5)"},
		{0, 422, "below spec.replicas.min (1)"},
		{-1, 422, "must be >= 0"},
	}
	for _, tt := range tests {
		code, body := call(t, srv, token, "PUT", "/v1/fleets/web/scale", `{"replicas":`+itoa(tt.replicas)+`}`)
		if code != tt.code || !strings.Contains(body, tt.want) {
			t.Errorf("scale to %d: %d %s", tt.replicas, code, body)
		}
	}
	if code, _ := call(t, srv, token, "PUT", "/v1/fleets/nope/scale", `{"replicas":1}`); code != 404 {
		t.Errorf("scale of a missing fleet: %d", code)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestBodyLimit(t *testing.T) {
	srv, _ := newServer(t)
	big := `{"fleets": [` + strings.Repeat(" ", 3<<20) + `]}`
	req, _ := http.NewRequest("POST", srv.URL+"/v1/apply", bytes.NewBufferString(big))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("3 MB body: %d, want 400", resp.StatusCode)
	}
}

// Undo points the fleet at the image of the revision that served before the current one, and
// refuses when there is none.
func TestRolloutUndo(t *testing.T) {
	srv, st := newServer(t)
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", nil))
	if code, body := call(t, srv, token, "POST", "/v1/fleets/web/rollout/undo", ""); code != 409 || !strings.Contains(body, "no earlier revision") {
		t.Fatalf("undo without history: %d %s", code, body)
	}
	ctx := t.Context()
	f, err := store.UpdateObject(ctx, st, store.Fleets, "web", func(f *v1alpha1.Fleet) (bool, error) {
		f.Spec.Image = "sha256:new"
		f.Status.CurrentRevision = "web-new"
		f.Status.History = []v1alpha1.RevisionHistory{{Revision: "web-new", Image: "sha256:new"}, {Revision: "web-old", Image: "sha256:old"}}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gen := f.Metadata.Generation
	if code, body := call(t, srv, token, "POST", "/v1/fleets/web/rollout/undo", ""); code != 200 {
		t.Fatalf("undo: %d %s", code, body)
	}
	f, err = store.GetObject[v1alpha1.Fleet](ctx, st, store.Fleets, "web")
	if err != nil {
		t.Fatal(err)
	}
	if f.Spec.Image != "sha256:old" || f.Metadata.Generation != gen+1 {
		t.Fatalf("after undo: image %q generation %d, want sha256:old and %d", f.Spec.Image, f.Metadata.Generation, gen+1)
	}
}

// /metrics is served when a handler is given, behind the same token as the rest of the API.
func TestMetricsNeedTheToken(t *testing.T) {
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "herd_up 1\n") })
	srv := httptest.NewServer(New(Options{Store: memory.New(), Token: token, Metrics: metrics}))
	t.Cleanup(srv.Close)
	for _, tok := range []string{"", "nope"} {
		if code, body := call(t, srv, tok, "GET", "/metrics", ""); code != http.StatusUnauthorized || strings.Contains(body, "herd_up") {
			t.Errorf("GET /metrics with token %q: %d %q, want a bare 401", tok, code, body)
		}
	}
	if code, body := call(t, srv, token, "GET", "/metrics", ""); code != http.StatusOK || body != "herd_up 1\n" {
		t.Errorf("GET /metrics with the token: %d %q", code, body)
	}
	// Without a handler there is no route.
	plain, _ := newServer(t)
	if code, _ := call(t, plain, token, "GET", "/metrics", ""); code != http.StatusNotFound {
		t.Errorf("GET /metrics without a handler: %d, want 404", code)
	}
}

// The chaos API is served when a handler is given, below /v1/chaos, behind the same token.
func TestChaosNeedsTheToken(t *testing.T) {
	chaos := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, r.Method+" "+r.URL.Path) })
	srv := httptest.NewServer(New(Options{Store: memory.New(), Token: token, Chaos: chaos}))
	t.Cleanup(srv.Close)
	for _, path := range []string{"/v1/chaos", "/v1/chaos/partition-region-eu-1/stop"} {
		if code, body := call(t, srv, "nope", "POST", path, "{}"); code != http.StatusUnauthorized || strings.Contains(body, path) {
			t.Errorf("POST %s with a wrong token: %d %q, want a bare 401", path, code, body)
		}
		if code, body := call(t, srv, token, "POST", path, "{}"); code != http.StatusOK || body != "POST "+path {
			t.Errorf("POST %s with the token: %d %q", path, code, body)
		}
	}
}
