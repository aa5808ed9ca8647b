package apiserver

import (
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
)

// herd rollout pin records a tenant's pin, resolved like an apply; without --image it keeps the
// tenant on what the fleet boots; unpin removes it; a tenant the fleet would not serve, a fleet
// without tenancy and an image never built are refused with what to do, and change nothing.
func TestPinTenant(t *testing.T) {
	srv, st, b := newPinServer(t)
	b.build("hello", "sha256:one")
	b.build("hello-v2", "sha256:two")
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("saas", func(f *v1alpha1.Fleet) {
		f.Spec.Image = "hello"
		f.Spec.Listeners = []v1alpha1.Listener{{Port: 18080, InstancePort: 30080}}
		f.Spec.Tenancy = &v1alpha1.Tenancy{Key: "header:X-Tenant", Tenants: []string{"a", "b"}}
	}))
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) { f.Spec.Image = "hello" }))
	if f := getFleet(t, st, "saas"); f.Spec.Tenancy == nil {
		t.Fatal("the tenancy fleet was not applied")
	}
	pins := func() map[string]v1alpha1.TenantPin { return getFleet(t, st, "saas").Requests.TenantPins }

	code, body := call(t, srv, token, "PUT", "/v1/fleets/saas/tenants/b/pin", `{"image":"hello-v2"}`)
	if p := pins()["b"]; code != 200 || p.Ref != "hello-v2" || p.Digest != "sha256:two" || p.At.IsZero() || len(pins()) != 1 {
		t.Fatalf("pin b to hello-v2: %d %s, pins %+v; want b on hello-v2 = sha256:two", code, body, pins())
	}
	// Without --image: a pinned tenant keeps its pin, another stays on what the fleet boots.
	if code, body := call(t, srv, token, "PUT", "/v1/fleets/saas/tenants/b/pin", `{}`); code != 200 || pins()["b"].Digest != "sha256:two" {
		t.Fatalf("pin b again without an image: %d %s, pins %+v; want b's pin kept", code, body, pins())
	}
	if code, body := call(t, srv, token, "PUT", "/v1/fleets/saas/tenants/a/pin", `{}`); code != 200 || pins()["a"].Digest != "sha256:one" || pins()["a"].Ref != "hello" {
		t.Fatalf("pin a without an image: %d %s, pins %+v; want a on hello = sha256:one", code, body, pins())
	}

	for _, tc := range []struct{ name, method, path, body, want string }{
		{"unknown tenant", "PUT", "/v1/fleets/saas/tenants/mallory/pin", `{}`, "not in spec.tenancy.tenants"},
		{"not a label", "PUT", "/v1/fleets/saas/tenants/Bad_Name/pin", `{}`, "DNS label"},
		{"image never built", "PUT", "/v1/fleets/saas/tenants/a/pin", `{"image":"nope"}`, "--image"},
		{"no tenancy", "PUT", "/v1/fleets/web/tenants/a/pin", `{}`, "no spec.tenancy"},
		{"unpin without tenancy", "DELETE", "/v1/fleets/web/tenants/a/pin", ``, "no spec.tenancy"},
		{"no such fleet", "PUT", "/v1/fleets/nope/tenants/a/pin", `{}`, "not found"},
	} {
		before := pins()
		code, body := call(t, srv, token, tc.method, tc.path, tc.body)
		if code < 400 || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d %s, want a refusal saying %q", tc.name, code, body, tc.want)
		}
		if after := pins(); len(after) != len(before) || after["a"] != before["a"] || after["b"] != before["b"] {
			t.Errorf("%s changed the pins: %+v -> %+v", tc.name, before, after)
		}
	}

	if code, body := call(t, srv, token, "DELETE", "/v1/fleets/saas/tenants/b/pin", ""); code != 200 || len(pins()) != 1 || pins()["a"].Digest != "sha256:one" {
		t.Fatalf("unpin b: %d %s, pins %+v; want a's pin only", code, body, pins())
	}
	call(t, srv, token, "DELETE", "/v1/fleets/saas/tenants/a/pin", "")
	if code, body := call(t, srv, token, "DELETE", "/v1/fleets/saas/tenants/a/pin", ""); code != 200 || pins() != nil {
		t.Fatalf("unpin a twice: %d %s, pins %+v; want none left and the second unpin accepted", code, body, pins())
	}
}
