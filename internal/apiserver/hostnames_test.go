package apiserver

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

func withHostname(h string) func(*v1alpha1.Fleet) {
	return func(f *v1alpha1.Fleet) { f.Spec.Global = &v1alpha1.Global{Hostname: h} }
}

// A hostname another fleet has is refused at apply, naming that fleet, and nothing is stored; so
// are two fleets of one apply with one hostname.
func TestApplyRefusesHostnameClash(t *testing.T) {
	srv, st := newServer(t)
	if code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", withHostname("web.herd.test"))); code != 200 {
		t.Fatalf("first fleet: %d %s", code, body)
	}
	code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("clash", withHostname("WEB.herd.test.")))
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `spec.global.hostname`) ||
		!strings.Contains(body, `web.herd.test is already the hostname of fleet \"web\": choose another`) {
		t.Fatalf("clash: %d %s, want 422 naming fleet web and the fix", code, body)
	}
	if _, err := store.GetObject[v1alpha1.Fleet](context.Background(), st, store.Fleets, "clash"); err == nil {
		t.Fatal("the refused fleet was stored")
	}
	if code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", withHostname("web.herd.test"))); code != 200 {
		t.Fatalf("re-apply of the holder: %d %s", code, body)
	}
	var req ApplyRequest
	for _, name := range []string{"one", "two"} {
		var r ApplyRequest
		_ = json.Unmarshal([]byte(fleetJSON(name, withHostname("x.herd.test"))), &r)
		req.Fleets = append(req.Fleets, r.Fleets...)
	}
	both, _ := json.Marshal(req)
	code, body = call(t, srv, token, "POST", "/v1/apply", string(both))
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `x.herd.test is also the hostname of fleet \"one\" (document 1 of this apply)`) {
		t.Fatalf("two fleets with one hostname in one apply: %d %s", code, body)
	}
}

func TestGetRoutesNeedsToken(t *testing.T) {
	srv, _ := newServer(t)
	if code, _ := call(t, srv, "wrong", "GET", "/v1/routes", ""); code != http.StatusUnauthorized {
		t.Errorf("GET /v1/routes with a wrong token: %d, want 401", code)
	}
	if code, body := call(t, srv, token, "GET", "/v1/routes", ""); code != http.StatusNotImplemented {
		t.Errorf("GET /v1/routes without a routes source: %d %s, want 501", code, body)
	}
}

// A discovery name another fleet publishes is refused at apply, naming that fleet; a fleet that
// is not published (no listener) takes no name, and apply says so.
func TestApplyDiscoveryNames(t *testing.T) {
	srv, _ := newServer(t)
	if code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("api", withListener(8081))); code != 200 || strings.Contains(body, "warnings") {
		t.Fatalf("a fleet with a listener: %d %s, want 200 without warnings", code, body)
	}
	code, body := call(t, srv, token, "POST", "/v1/apply", fleetJSON("api2", func(f *v1alpha1.Fleet) {
		withListener(8082)(f)
		f.Spec.Discovery = &v1alpha1.Discovery{Name: "api"}
	}))
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, `spec.discovery.name`) ||
		!strings.Contains(body, `api is already the discovery name of fleet \"api\": choose another`) {
		t.Fatalf("clash: %d %s, want 422 naming fleet api and the fix", code, body)
	}
	code, body = call(t, srv, token, "POST", "/v1/apply", fleetJSON("batch", nil))
	if code != 200 || !strings.Contains(body, "spec.discovery: the fleet has no listener, so it gets no name in herd.internal") {
		t.Fatalf("a fleet without listeners: %d %s, want 200 with a warning", code, body)
	}
	code, body = call(t, srv, token, "POST", "/v1/apply", fleetJSON("batch2", func(f *v1alpha1.Fleet) {
		on := true
		f.Spec.Discovery = &v1alpha1.Discovery{Enabled: &on}
	}))
	if code != http.StatusUnprocessableEntity || !strings.Contains(body, "spec.discovery.enabled") || !strings.Contains(body, "the fleet has no listener") {
		t.Fatalf("discovery on without listeners: %d %s, want 422", code, body)
	}
}
