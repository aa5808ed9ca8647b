package store_test

import (
	"context"
	"errors"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

func putFleet(t *testing.T, s store.Store, f *v1alpha1.Fleet) {
	t.Helper()
	if err := store.PutObject(context.Background(), s, store.Fleets, f); err != nil {
		t.Fatal(err)
	}
}

// PutObject creates an object without a version, updates one at its version and sets the new
// version each time; a write from a stale version is a conflict and changes nothing.
func TestPutObject(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{Image: "img-1"}}
	if err := store.PutObject(ctx, s, store.Fleets, f); err != nil || f.Metadata.ResourceVersion == 0 {
		t.Fatalf("create: %v, version %d", err, f.Metadata.ResourceVersion)
	}
	stale := *f
	created := f.Metadata.ResourceVersion
	f.Spec.Image = "img-2"
	if err := store.PutObject(ctx, s, store.Fleets, f); err != nil || f.Metadata.ResourceVersion <= created {
		t.Fatalf("update: %v, version %d after %d", err, f.Metadata.ResourceVersion, created)
	}
	stale.Spec.Image = "img-3"
	if err := store.PutObject(ctx, s, store.Fleets, &stale); !errors.Is(err, store.ErrConflict) || stale.Metadata.ResourceVersion != created {
		t.Fatalf("write from a stale version: %v, version %d; want a conflict and the version untouched", err, stale.Metadata.ResourceVersion)
	}
	got, err := store.GetObject[v1alpha1.Fleet](ctx, s, store.Fleets, "web")
	if err != nil || got.Spec.Image != "img-2" || got.Metadata.ResourceVersion != f.Metadata.ResourceVersion {
		t.Fatalf("stored %+v %v, want img-2 at version %d", got, err, f.Metadata.ResourceVersion)
	}
}

// A write that lands between UpdateObject's read and its write makes it read and change the
// object again, so that neither write is lost.
func TestUpdateObjectRetriesAfterAConflict(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	putFleet(t, s, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{Image: "img-1"}})

	calls := 0
	got, err := store.UpdateObject(ctx, s, store.Fleets, "web", func(f *v1alpha1.Fleet) (bool, error) {
		calls++
		if calls == 1 {
			// Another writer changes the image after this read.
			other := *f
			other.Spec.Image = "img-2"
			putFleet(t, s, &other)
		}
		f.Metadata.Labels = map[string]string{"seen": f.Spec.Image}
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("change called %d times, want 2 (once more after the conflict)", calls)
	}
	stored, err := store.GetObject[v1alpha1.Fleet](ctx, s, store.Fleets, "web")
	if err != nil {
		t.Fatal(err)
	}
	if stored.Spec.Image != "img-2" || stored.Metadata.Labels["seen"] != "img-2" {
		t.Fatalf("stored %+v %+v, want the other writer's image and a change made on top of it", stored.Spec, stored.Metadata.Labels)
	}
	if got.Metadata.ResourceVersion != stored.Metadata.ResourceVersion {
		t.Fatalf("returned resource version %d, want the written one %d", got.Metadata.ResourceVersion, stored.Metadata.ResourceVersion)
	}
}

// change's verdict decides: nothing is written when it reports no change or an error, and its
// error is returned as is.
func TestUpdateObjectWritesOnlyChanges(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	putFleet(t, s, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{Image: "img-1"}})
	_, rev, err := s.List(ctx, store.Fleets)
	if err != nil {
		t.Fatal(err)
	}
	refused := errors.New("refused")
	for _, tc := range []struct {
		changed bool
		err     error
	}{{false, nil}, {true, refused}} {
		_, err := store.UpdateObject(ctx, s, store.Fleets, "web", func(f *v1alpha1.Fleet) (bool, error) {
			f.Spec.Image = "img-2"
			return tc.changed, tc.err
		})
		if !errors.Is(err, tc.err) {
			t.Fatalf("UpdateObject: %v, want %v", err, tc.err)
		}
	}
	if _, now, _ := s.List(ctx, store.Fleets); now != rev {
		t.Fatalf("store revision %d after updates that changed nothing, want %d", now, rev)
	}
	if _, err := store.UpdateObject(ctx, s, store.Fleets, "nope", func(*v1alpha1.Fleet) (bool, error) { return true, nil }); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("UpdateObject of a missing object: %v, want ErrNotFound", err)
	}
}

// The generation moves on spec changes only: a write that changes nothing in the spec, or
// changes the status or the requests, leaves it.
func TestFleetGenerationOnSpecChangesOnly(t *testing.T) {
	ctx := context.Background()
	s := memory.New()
	t.Cleanup(func() { _ = s.Close() })
	putFleet(t, s, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web", Generation: 1}, Spec: v1alpha1.FleetSpec{Image: "img-1"}})
	gen := func() int64 {
		f, err := store.GetObject[v1alpha1.Fleet](ctx, s, store.Fleets, "web")
		if err != nil {
			t.Fatal(err)
		}
		return f.Metadata.Generation
	}

	steps := []struct {
		name   string
		update func() error
		want   int64
	}{
		{"spec unchanged", func() error {
			_, err := store.UpdateFleetSpec(ctx, s, "web", func(f *v1alpha1.Fleet) error { f.Spec.Image = "img-1"; return nil })
			return err
		}, 1},
		{"nil and empty lists", func() error {
			_, err := store.UpdateFleetSpec(ctx, s, "web", func(f *v1alpha1.Fleet) error { f.Spec.Listeners = []v1alpha1.Listener{}; return nil })
			return err
		}, 1},
		{"spec changed", func() error {
			_, err := store.UpdateFleetSpec(ctx, s, "web", func(f *v1alpha1.Fleet) error { f.Spec.Image = "img-2"; return nil })
			return err
		}, 2},
		{"other fields than the spec are not written", func() error {
			f, err := store.UpdateFleetSpec(ctx, s, "web", func(f *v1alpha1.Fleet) error {
				f.Spec.Image, f.Metadata.Generation, f.Status.Phase = "img-3", 9, "x"
				return nil
			})
			if err == nil && f.Status.Phase == "x" {
				t.Error("a spec update wrote the status")
			}
			return err
		}, 3},
		{"refused change", func() error {
			_, err := store.UpdateFleetSpec(ctx, s, "web", func(f *v1alpha1.Fleet) error { f.Spec.Image = "img-3"; return errors.New("no") })
			if err == nil {
				t.Error("the change's error was lost")
			}
			return nil
		}, 3},
		{"requests", func() error {
			_, err := store.UpdateFleetRequests(ctx, s, "web", func(_ *v1alpha1.Fleet, r *v1alpha1.FleetRequests) (bool, error) {
				r.Rollout = &v1alpha1.RolloutRequest{Command: v1alpha1.RolloutPromote}
				return true, nil
			})
			return err
		}, 3},
	}
	for _, st := range steps {
		if err := st.update(); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if g := gen(); g != st.want {
			t.Fatalf("%s: generation %d, want %d", st.name, g, st.want)
		}
	}
	f, _ := store.GetObject[v1alpha1.Fleet](ctx, s, store.Fleets, "web")
	if f.Spec.Image != "img-3" || f.Requests.Rollout == nil {
		t.Fatalf("fleet %+v: want image img-3 and the request", f)
	}
	if g, _ := store.FleetGeneration(nil, &f.Spec, nil); g != 1 {
		t.Fatalf("generation of a new fleet %d, want 1", g)
	}
}
