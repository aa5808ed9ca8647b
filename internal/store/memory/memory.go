// Package memory is a store.Store held in memory, for tests: it keeps the contract of the bolt
// store (it passes the same storetest suite) without touching the disk, and forgets everything
// when the process ends.
package memory

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"herd.dev/herd/internal/store"
)

var _ store.Store = (*Store)(nil)

// Store is an in-memory store.Store. The zero value is not usable: call New.
type Store struct {
	// mu guards everything below. Txn publishes its events while holding it, which is what keeps
	// the watch hub fed in revision order.
	mu      sync.RWMutex
	rev     int64
	objects map[string]map[string]store.Record // kind -> name -> record
	closed  bool
	hub     *store.Hub
}

// New returns an empty store at revision 0.
func New() *Store {
	return &Store{
		objects: map[string]map[string]store.Record{},
		hub:     store.NewHub(0, store.DefaultWatchHistory),
	}
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, kind, name string) (store.Record, error) {
	if err := ctx.Err(); err != nil {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, store.ErrClosed)
	}
	rec, ok := s.objects[kind][name]
	if !ok {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, store.ErrNotFound)
	}
	return clone(rec), nil
}

// List implements store.Store.
func (s *Store) List(ctx context.Context, kind string) ([]store.Record, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", kind, err)
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return nil, 0, fmt.Errorf("list %s: %w", kind, store.ErrClosed)
	}
	recs := make([]store.Record, 0, len(s.objects[kind]))
	for _, rec := range s.objects[kind] {
		recs = append(recs, clone(rec))
	}
	slices.SortFunc(recs, func(a, b store.Record) int { return strings.Compare(a.Name, b.Name) })
	return recs, s.rev, nil
}

// Txn implements store.Store.
func (s *Store) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("txn: %w", err)
	}
	if err := store.CheckOps(ops); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, fmt.Errorf("txn: %w", store.ErrClosed)
	}

	// Work out every op before changing anything, so that a failing op leaves the objects exactly
	// as they were.
	owned := make([]store.Op, len(ops))
	for i, op := range ops {
		if op.Type != store.OpDelete {
			// The caller may reuse its buffer; the store, its readers and watchers keep this copy.
			op.Value = bytes.Clone(op.Value)
		}
		owned[i] = op
	}
	stored := func(kind, name string) *store.Record {
		if rec, ok := s.objects[kind][name]; ok {
			return &rec
		}
		return nil
	}
	events, err := store.ApplyAll(owned, stored, func(i int) int64 { return s.rev + int64(i) + 1 })
	if err != nil {
		return nil, err
	}
	for _, e := range events {
		r := e.Record
		if e.Type == store.Deleted {
			delete(s.objects[r.Kind], r.Name)
			continue
		}
		if s.objects[r.Kind] == nil {
			s.objects[r.Kind] = map[string]store.Record{}
		}
		s.objects[r.Kind][r.Name] = r
	}
	s.rev += int64(len(ops))
	s.hub.Publish(events)

	recs := make([]store.Record, len(events))
	for i, e := range events {
		recs[i] = clone(e.Record)
	}
	return recs, nil
}

// Watch implements store.Store.
func (s *Store) Watch(ctx context.Context, kind string, since int64) (<-chan store.Event, error) {
	return s.hub.Watch(ctx, kind, since)
}

// Close implements store.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.objects = nil
	s.mu.Unlock()
	s.hub.Close()
	return nil
}

// clone gives a caller its own copy of a record's value, as the bolt store does (it copies out
// of its memory map), so that a caller modifying what it read cannot change the store.
func clone(rec store.Record) store.Record {
	rec.Value = bytes.Clone(rec.Value)
	return rec
}
