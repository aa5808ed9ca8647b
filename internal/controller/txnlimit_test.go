package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// limitedStore refuses a Txn of more than max ops, as etcd does beyond --max-txn-ops, and says so
// through store.TxnLimiter.
type limitedStore struct {
	store.Store
	max int
}

func (s *limitedStore) MaxTxnOps() int { return s.max }

func (s *limitedStore) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	if len(ops) > s.max {
		return nil, fmt.Errorf("a Txn of %d ops is over the limit of %d", len(ops), s.max)
	}
	return s.Store.Txn(ctx, ops...)
}

// A fleet that changes more records at once than the store takes in one Txn is written in several,
// both when its instances are created and when they are adopted after their records were lost.
func TestRecordWritesStayWithinTheStoreTxnLimit(t *testing.T) {
	st := &limitedStore{Store: memory.New(), max: 4}
	e := newEnv(t, st, nil)
	e.put(fleetSpec("web", "img", 10))
	waitFor(t, 10*time.Second, e.converged("web", 10, ""))
	e.stop()

	ctx := context.Background()
	recs, _, err := st.List(ctx, store.Instances)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := store.Delete(ctx, st, store.Instances, r.Name, 0); err != nil {
			t.Fatal(err)
		}
	}
	e.start() // stopped by newEnv's cleanup
	waitFor(t, 10*time.Second, e.converged("web", 10, ""))
}
