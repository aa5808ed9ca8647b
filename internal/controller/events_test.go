package controller

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/events/eventstest"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// failingStore refuses every write of instance records while fail is set.
type failingStore struct {
	store.Store
	fail atomic.Bool
}

func (s *failingStore) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	for _, op := range ops {
		if op.Kind == store.Instances && s.fail.Load() {
			return nil, errors.New("disk full")
		}
	}
	return s.Store.Txn(ctx, ops...)
}

// An event about instances is recorded only once their records are stored: while the store
// refuses them, no ScalingUp event claims that instances are being created.
func TestEventsFollowTheCommit(t *testing.T) {
	st := &failingStore{Store: memory.New()}
	st.fail.Store(true)
	rec := &eventstest.Recorder{}
	e := startEnv(t, &env{store: st, recorder: rec})
	e.put(fleetSpec("web", "img", 2))
	e.waitReconciles(5)
	if n := e.fake.Calls("Create"); n != 0 {
		t.Fatalf("%d instances created although their records could not be written", n)
	}
	if n := rec.Count("ScalingUp"); n != 0 {
		t.Fatalf("%d ScalingUp events recorded while no record could be written", n)
	}
	st.fail.Store(false)
	waitFor(t, 5*time.Second, e.converged("web", 2, ""))
	if n := rec.Count("ScalingUp"); n == 0 {
		t.Fatal("no ScalingUp event once the records were written")
	}
}
