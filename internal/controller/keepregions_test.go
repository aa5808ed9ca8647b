package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
)

// regionKeeper is a provider that records the regions it is told to keep.
type regionKeeper struct {
	provider.Provider
	mu   sync.Mutex
	kept []string // each call's regions, joined
}

func (k *regionKeeper) KeepRegions(_ context.Context, regions []string) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.kept = append(k.kept, strings.Join(regions, ","))
	return nil
}

// last returns the regions of the last call, and whether there was one.
func (k *regionKeeper) last() (string, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if len(k.kept) == 0 {
		return "", false
	}
	return k.kept[len(k.kept)-1], true
}

// The provider keeps the regions the fleets name, a fleet scaled to zero's too, and is told to
// let a region go once the last fleet naming it is deleted.
func TestKeepRegionsFollowsTheFleets(t *testing.T) {
	k := &regionKeeper{}
	e := startEnv(t, &env{keeper: k})
	wantKept := func(want string) func() string {
		return func() string {
			if got, ok := k.last(); !ok || got != want {
				return fmt.Sprintf("regions kept %q (told: %v), want %q", got, ok, want)
			}
			return ""
		}
	}
	a := fleetSpec("a", "img", 1)
	a.Spec.Regions = []v1alpha1.Region{{Name: "east", Provider: "fake"}, {Name: "west", Provider: "fake"}}
	e.put(a)
	b := fleetSpec("b", "img", 1)
	b.Spec.Regions = []v1alpha1.Region{{Name: "west", Provider: "fake"}}
	e.put(b)
	waitFor(t, 5*time.Second, wantKept("east,west"))

	a.Spec.Replicas.Desired = new(int32(0))
	e.put(a)
	waitFor(t, 5*time.Second, e.converged("a", 0, ""))
	if got, _ := k.last(); got != "east,west" {
		t.Fatalf("regions kept after scaling fleet a to zero: %q, want east,west", got)
	}

	if err := store.Delete(context.Background(), e.store, store.Fleets, "a", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, wantKept("west"))
	if err := store.Delete(context.Background(), e.store, store.Fleets, "b", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, wantKept(""))
}
