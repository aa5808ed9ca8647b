package storetest

import (
	"context"
	"sync/atomic"

	"herd.dev/herd/internal/store"
)

// Counting wraps a store and counts the calls made through it, so that tests and benchmarks can
// show how much store traffic some work costs (none, for a settled controller).
type Counting struct {
	store.Store
	// Reads counts Get and List calls; Writes counts Txn calls.
	Reads, Writes atomic.Int64
}

var _ store.TxnLimiter = (*Counting)(nil)

// Get implements store.Store.
func (s *Counting) Get(ctx context.Context, kind, name string) (store.Record, error) {
	s.Reads.Add(1)
	return s.Store.Get(ctx, kind, name)
}

// List implements store.Store.
func (s *Counting) List(ctx context.Context, kind string) ([]store.Record, int64, error) {
	s.Reads.Add(1)
	return s.Store.List(ctx, kind)
}

// Txn implements store.Store.
func (s *Counting) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	s.Writes.Add(1)
	return s.Store.Txn(ctx, ops...)
}

// MaxTxnOps passes the wrapped store's limit on (store.TxnLimiter), which embedding would hide.
func (s *Counting) MaxTxnOps() int { return store.MaxTxnOps(s.Store) }
