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
	op, err := store.PutOp(store.Fleets, f)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Txn(context.Background(), op); err != nil {
		t.Fatal(err)
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
