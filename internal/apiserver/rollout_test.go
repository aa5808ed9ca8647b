package apiserver

import (
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Promote and abort record the command, with the revision it is for, in the fleet's requests,
// without touching the spec or the status, and are refused when no rollout is in progress.
func TestRolloutPromoteAbort(t *testing.T) {
	srv, st := newServer(t)
	if code, _ := call(t, srv, token, "POST", "/v1/fleets/nope/rollout/promote", ""); code != 404 {
		t.Fatalf("promote of a missing fleet: %d, want 404", code)
	}
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", nil))
	for _, cmd := range []string{"promote", "abort"} {
		if code, body := call(t, srv, token, "POST", "/v1/fleets/web/rollout/"+cmd, ""); code != 409 || !strings.Contains(body, "no rollout in progress") {
			t.Fatalf("%s without a rollout: %d %s", cmd, code, body)
		}
	}
	ctx := t.Context()
	f, err := store.UpdateObject(ctx, st, store.Fleets, "web", func(f *v1alpha1.Fleet) (bool, error) {
		f.Status.CurrentRevision = "web-new"
		f.Status.Rollout = &v1alpha1.RolloutStatus{Revision: "web-new", PreviousRevision: "web-old", Strategy: v1alpha1.StrategyCanary, Phase: v1alpha1.RolloutProgressing}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	gen := f.Metadata.Generation
	for _, c := range []struct{ path, want string }{{"promote", v1alpha1.RolloutPromote}, {"abort", v1alpha1.RolloutAbort}} {
		if code, body := call(t, srv, token, "POST", "/v1/fleets/web/rollout/"+c.path, ""); code != 200 {
			t.Fatalf("%s: %d %s", c.path, code, body)
		}
		f, err = store.GetObject[v1alpha1.Fleet](ctx, st, store.Fleets, "web")
		if err != nil {
			t.Fatal(err)
		}
		req := f.Requests.Rollout
		if req == nil || req.Command != c.want || req.Revision != "web-new" || req.RequestedAt.IsZero() || f.Metadata.Generation != gen {
			t.Fatalf("after %s: request %+v generation %d, want %s of web-new and generation %d", c.path, req, f.Metadata.Generation, c.want, gen)
		}
		if f.Status.Rollout.HandledRequest != nil {
			t.Fatalf("after %s: the API wrote the status: %+v", c.path, f.Status.Rollout)
		}
	}
	// A re-apply of the spec keeps the request for the controller.
	call(t, srv, token, "POST", "/v1/apply", fleetJSON("web", func(f *v1alpha1.Fleet) { f.Spec.Image = "img-2" }))
	if f, _ = store.GetObject[v1alpha1.Fleet](ctx, st, store.Fleets, "web"); f.Requests.Rollout == nil || f.Requests.Rollout.Command != v1alpha1.RolloutAbort {
		t.Fatalf("requests after an apply: %+v, want the abort kept", f.Requests)
	}
}
