// Package bolt is herd's default store.Store: one bbolt file in the data directory.
//
// Layout: a bucket "meta" holds the revision counter and the file format; a bucket "objects" holds
// one nested bucket per kind, whose keys are object names and whose values are the 8-byte
// big-endian resource version followed by the object's JSON. Nesting the kinds keeps any kind name
// from colliding with "meta".
//
// Every Txn is one bbolt read-write transaction that also advances the counter, so a crash leaves
// either the whole transaction or none of it, and the revision after reopening continues from the
// counter. Concurrent single-op Txns are merged by bbolt's Batch into one transaction and one
// fsync, which is what lets the controller write thousands of statuses a second.
package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	bbolt "go.etcd.io/bbolt"
	bberrors "go.etcd.io/bbolt/errors"

	"herd.dev/herd/internal/store"
)

var _ store.Store = (*Store)(nil)

var (
	metaBucket    = []byte("meta")
	objectsBucket = []byte("objects")
	revisionKey   = []byte("revision")
	formatKey     = []byte("format")
)

// format is the layout described in the package comment. A file written in another format is
// refused rather than misread.
const format = "1"

// Option changes how Open opens a store.
type Option func(*options)

type options struct {
	lockTimeout  time.Duration
	watchHistory int
	batchDelay   time.Duration
}

// WithLockTimeout sets how long Open waits for another process to release the file.
// Default: 1s, so that a second herd up on the same data directory fails at once.
func WithLockTimeout(d time.Duration) Option { return func(o *options) { o.lockTimeout = d } }

// WithWatchHistory sets how many recent changes the store remembers for Watch.
// Default: store.DefaultWatchHistory.
func WithWatchHistory(n int) Option { return func(o *options) { o.watchHistory = n } }

// WithBatchDelay sets how long a single-op Txn waits for others to share its transaction when
// other writes are in flight. Default: 2ms, a fraction of an fsync on the disks herd runs on.
func WithBatchDelay(d time.Duration) Option { return func(o *options) { o.batchDelay = d } }

// Store is a store.Store in a bbolt file. Open it with Open.
type Store struct {
	db     *bbolt.DB
	hub    *store.Hub
	closed atomic.Bool
	// writers counts Txns in progress: a single-op Txn with no company commits at once instead of
	// waiting for a batch to fill.
	writers atomic.Int64
}

// Open opens the store at path, creating the file (mode 0600) and its directory (mode 0700) if
// needed. It fails after a second if another process has the file open.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{lockTimeout: time.Second, watchHistory: store.DefaultWatchHistory, batchDelay: 2 * time.Millisecond}
	for _, opt := range opts {
		opt(&o)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("open store: create its directory: %w", err)
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout: o.lockTimeout,
		// As etcd does: the free list is rebuilt when the file is opened instead of being written
		// on every commit, and kept in a hash map that stays fast as the file grows.
		NoFreelistSync: true,
		FreelistType:   bbolt.FreelistMapType,
	})
	if errors.Is(err, bberrors.ErrTimeout) {
		return nil, fmt.Errorf("open store %s: the file is locked: another herd up is using %s (stop it, or pass another --data-dir): %w", path, dir, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	db.MaxBatchDelay = o.batchDelay

	var rev int64
	err = db.Update(func(tx *bbolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists(metaBucket)
		if err != nil {
			return err
		}
		if _, err := tx.CreateBucketIfNotExists(objectsBucket); err != nil {
			return err
		}
		switch f := meta.Get(formatKey); {
		case f == nil:
			if err := meta.Put(formatKey, []byte(format)); err != nil {
				return err
			}
		case string(f) != format:
			return fmt.Errorf("the file has format %q and this herd reads format %q: use the herd that wrote it", f, format)
		}
		rev = revision(meta)
		return nil
	})
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("open store %s: %w", path, err)
	}
	return &Store{db: db, hub: store.NewHub(rev, o.watchHistory)}, nil
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, kind, name string) (store.Record, error) {
	if err := s.usable(ctx); err != nil {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, err)
	}
	var rec store.Record
	found := false
	err := s.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket(objectsBucket).Bucket([]byte(kind))
		if b == nil {
			return nil
		}
		v := b.Get([]byte(name))
		if v == nil {
			return nil
		}
		found = true
		var err error
		rec, err = decode(kind, name, v)
		return err
	})
	if err != nil {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, closedIfNotOpen(err))
	}
	if !found {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, store.ErrNotFound)
	}
	return rec, nil
}

// List implements store.Store. The records and the revision come from one read transaction.
func (s *Store) List(ctx context.Context, kind string) ([]store.Record, int64, error) {
	if err := s.usable(ctx); err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", kind, err)
	}
	var recs []store.Record
	var rev int64
	err := s.db.View(func(tx *bbolt.Tx) error {
		rev = revision(tx.Bucket(metaBucket))
		b := tx.Bucket(objectsBucket).Bucket([]byte(kind))
		if b == nil {
			return nil
		}
		// bbolt keeps keys in byte order, which is the order of Go strings: already sorted by name.
		return b.ForEach(func(k, v []byte) error {
			rec, err := decode(kind, string(k), v)
			recs = append(recs, rec)
			return err
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", kind, closedIfNotOpen(err))
	}
	if recs == nil {
		recs = []store.Record{}
	}
	return recs, rev, nil
}

// Txn implements store.Store.
func (s *Store) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	if err := s.usable(ctx); err != nil {
		return nil, fmt.Errorf("txn: %w", err)
	}
	if err := store.CheckOps(ops); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return []store.Record{}, nil
	}
	// The caller may reuse its buffers once Txn returns; the events keep these copies.
	ops = append([]store.Op(nil), ops...)
	for i := range ops {
		ops[i].Value = bytes.Clone(ops[i].Value)
	}

	var (
		events []store.Event
		opErr  error
	)
	write := func(tx *bbolt.Tx) error {
		// Batch may call this more than once (when another call in its batch fails): start over.
		events, opErr = nil, nil
		ev, err := apply(tx, ops)
		if err != nil && len(ops) == 1 && store.IsOpError(err) {
			// A single op fails before it writes anything, so the batch can commit the other
			// calls' writes: report the failure to this caller alone instead of making bbolt
			// re-run the whole batch without it.
			opErr = err
			return nil
		}
		events = ev
		return err
	}

	var err error
	if s.writers.Add(1) > 1 && len(ops) == 1 {
		err = s.db.Batch(write)
	} else {
		// Alone, or a transaction of several ops (already one commit): no reason to wait for
		// company. A multi-op Txn is kept out of batches because its failure would make bbolt
		// re-run every other call of the batch.
		err = s.db.Update(write)
	}
	s.writers.Add(-1)
	if err == nil {
		err = opErr
	}
	if err != nil {
		if store.IsOpError(err) {
			return nil, err
		}
		return nil, fmt.Errorf("txn: %w", closedIfNotOpen(err))
	}

	// Only now is the transaction on disk: watchers may hear of it.
	s.hub.Publish(events)
	recs := make([]store.Record, len(events))
	for i, e := range events {
		recs[i] = e.Record
		recs[i].Value = bytes.Clone(e.Record.Value)
	}
	return recs, nil
}

// apply makes the writes of ops in tx and returns their events. On error it may have written some
// of them: the caller rolls tx back.
func apply(tx *bbolt.Tx, ops []store.Op) ([]store.Event, error) {
	meta := tx.Bucket(metaBucket)
	objects := tx.Bucket(objectsBucket)
	rev := revision(meta)
	events := make([]store.Event, 0, len(ops))
	for _, op := range ops {
		kind, name := []byte(op.Kind), []byte(op.Name)
		var cur *store.Record
		b := objects.Bucket(kind)
		if b != nil {
			if v := b.Get(name); v != nil {
				rec, err := decode(op.Kind, op.Name, v)
				if err != nil {
					return nil, err
				}
				cur = &rec
			}
		}
		rev++
		e, err := store.Apply(op, cur, rev)
		if err != nil {
			return nil, err
		}
		if b == nil {
			// Apply only adds to a kind that has no bucket yet: create it now that the op is known
			// to succeed.
			if b, err = objects.CreateBucket(kind); err != nil {
				return nil, fmt.Errorf("%s %s/%s: create bucket: %w", op.Type, op.Kind, op.Name, err)
			}
		}
		if e.Type == store.Deleted {
			err = b.Delete(name)
		} else {
			err = b.Put(name, encode(e.Record))
		}
		if err != nil {
			return nil, fmt.Errorf("%s %s/%s: %w", op.Type, op.Kind, op.Name, err)
		}
		events = append(events, e)
	}
	if err := meta.Put(revisionKey, binary.BigEndian.AppendUint64(nil, uint64(rev))); err != nil {
		return nil, fmt.Errorf("write revision: %w", err)
	}
	return events, nil
}

// Watch implements store.Store.
func (s *Store) Watch(ctx context.Context, kind string, since int64) (<-chan store.Event, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("watch %s: %w", kind, store.ErrClosed)
	}
	return s.hub.Watch(ctx, kind, since)
}

// Close implements store.Store. It waits for transactions in progress.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.hub.Close()
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("close store %s: %w", s.db.Path(), err)
	}
	return nil
}

func (s *Store) usable(ctx context.Context) error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return ctx.Err()
}

// closedIfNotOpen turns bbolt's error for a closed database, which a call racing with Close can
// meet, into the store's.
func closedIfNotOpen(err error) error {
	if errors.Is(err, bberrors.ErrDatabaseNotOpen) {
		return store.ErrClosed
	}
	return err
}

func revision(meta *bbolt.Bucket) int64 {
	v := meta.Get(revisionKey)
	if len(v) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v))
}

func encode(rec store.Record) []byte {
	v := make([]byte, 8, 8+len(rec.Value))
	binary.BigEndian.PutUint64(v, uint64(rec.ResourceVersion))
	return append(v, rec.Value...)
}

// decode copies a stored value out of bbolt's memory map, which is only valid during the
// transaction.
func decode(kind, name string, v []byte) (store.Record, error) {
	if len(v) < 8 {
		return store.Record{}, fmt.Errorf("%s/%s: stored value is %d bytes, shorter than its version", kind, name, len(v))
	}
	return store.Record{
		Kind:            kind,
		Name:            name,
		Value:           bytes.Clone(v[8:]),
		ResourceVersion: int64(binary.BigEndian.Uint64(v[:8])),
	}, nil
}
