package apiserver

import (
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Promote and abort record the command in the status of a rollout in progress, without touching
// the spec, and are refused when no rollout is in progress.
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
		if f.Status.Rollout.Requested != c.want || f.Metadata.Generation != gen {
			t.Fatalf("after %s: requested %q generation %d, want %q and %d", c.path, f.Status.Rollout.Requested, f.Metadata.Generation, c.want, gen)
		}
	}
}
