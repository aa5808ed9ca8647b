// Package bolt is herd's default store.Store: one bbolt file in the data directory.
//
// Layout: a bucket "meta" holds the revision counter and the file format; a bucket "objects" holds
// one nested bucket per kind, whose keys are object names and whose values are the 8-byte
// big-endian resource version followed by the object's JSON. Nesting the kinds keeps any kind name
// from colliding with "meta".
//
// Every Txn is written inside one bbolt read-write transaction that also advances the counter, so
// a crash leaves either the whole Txn or none of it, and the revision after reopening continues
// from the counter.
//
// Writes go through one committer goroutine (group commit): it takes every Txn waiting, writes
// them in one bbolt transaction, one fsync, and answers each. An idle store commits a lone Txn at
// once; under load, the Txns that arrive during one commit share the next. bbolt's own Batch was
// measured and rejected: a timer delays every batch (10ms by default), so 32 writers each writing
// one status after another managed 2,500 writes/s with it and about 30,000 with the committer;
// and it re-runs a whole batch when one call in it fails. Here each Txn's ops are all decided
// before any of them is written, so a Txn that fails (not found, conflict, ...) writes nothing and
// the others in its commit proceed.
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
}

// WithLockTimeout sets how long Open waits for another process to release the file.
// Default: 1s, so that a second herd up on the same data directory fails at once.
func WithLockTimeout(d time.Duration) Option { return func(o *options) { o.lockTimeout = d } }

// WithWatchHistory sets how many recent changes the store remembers for Watch.
// Default: store.DefaultWatchHistory.
func WithWatchHistory(n int) Option { return func(o *options) { o.watchHistory = n } }

// maxCommitOps stops the committer from adding more Txns to a commit once it holds this many ops,
// which bounds the size of one bbolt transaction and the wait of the Txns in it.
const maxCommitOps = 20000

// Store is a store.Store in a bbolt file. Open it with Open.
type Store struct {
	db  *bbolt.DB
	hub *store.Hub
	// writes hands Txns to the committer. It is unbuffered so that a Txn is either taken by the
	// committer, which then always answers it, or not taken at all (when the store closes).
	writes        chan *write
	stop          chan struct{}
	committerDone chan struct{}
	closed        atomic.Bool
}

// write is one Txn waiting for the committer.
type write struct {
	ops []store.Op
	// Set by the committer before it closes done.
	events []store.Event
	err    error
	done   chan struct{}
}

// Open opens the store at path, creating the file (mode 0600) and its directory (mode 0700) if
// needed. It fails after a second if another process has the file open.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{lockTimeout: time.Second, watchHistory: store.DefaultWatchHistory}
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
	s := &Store{
		db:            db,
		hub:           store.NewHub(rev, o.watchHistory),
		writes:        make(chan *write),
		stop:          make(chan struct{}),
		committerDone: make(chan struct{}),
	}
	go s.committer()
	return s, nil
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
	// The caller may reuse its buffers once Txn returns; the store and the watchers keep copies.
	w := &write{ops: make([]store.Op, len(ops)), done: make(chan struct{})}
	for i, op := range ops {
		op.Value = bytes.Clone(op.Value)
		w.ops[i] = op
	}
	select {
	case s.writes <- w:
	case <-s.stop:
		return nil, fmt.Errorf("txn: %w", store.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("txn: %w", ctx.Err())
	}
	// Taken by the committer: the outcome is decided, whatever ctx does now.
	<-w.done
	if w.err != nil {
		return nil, w.err
	}
	recs := make([]store.Record, len(w.events))
	for i, e := range w.events {
		recs[i] = e.Record
		recs[i].Value = bytes.Clone(e.Record.Value)
	}
	return recs, nil
}

// committer commits the Txns handed to it until the store closes: each commit takes one Txn and
// every other already waiting.
func (s *Store) committer() {
	defer close(s.committerDone)
	for {
		var batch []*write
		select {
		case w := <-s.writes:
			batch = append(batch, w)
		case <-s.stop:
			return
		}
	collect:
		for ops := len(batch[0].ops); ops < maxCommitOps; {
			select {
			case w := <-s.writes:
				batch = append(batch, w)
				ops += len(w.ops)
			default:
				break collect
			}
		}
		s.commit(batch)
	}
}

// commit writes batch in one bbolt transaction, publishes the events of the Txns that succeeded
// and answers every Txn.
func (s *Store) commit(batch []*write) {
	err := s.db.Update(func(tx *bbolt.Tx) error {
		for _, w := range batch {
			w.events, w.err = apply(tx, w.ops)
			if w.err != nil && !store.IsOpError(w.err) {
				return w.err
			}
		}
		return nil
	})
	if err != nil && len(batch) > 1 {
		// bbolt refused a write (a key longer than it allows, a full disk...). Give each Txn its
		// own transaction so that only the one at fault fails.
		for _, w := range batch {
			s.commit([]*write{w})
		}
		return
	}
	var events []store.Event
	for _, w := range batch {
		if err != nil {
			w.err = fmt.Errorf("txn: %w", closedIfNotOpen(err))
		}
		if w.err == nil {
			events = append(events, w.events...)
		}
	}
	// Only now is the transaction on disk: watchers may hear of it.
	s.hub.Publish(events)
	for _, w := range batch {
		close(w.done)
	}
}

// apply writes ops in tx and returns their events. It decides every op before it writes any, so
// when an op fails (the error wraps ErrExists, ErrNotFound or ErrConflict) it has written nothing
// and the other Txns of the commit are unaffected. Any other error means tx must be rolled back.
func apply(tx *bbolt.Tx, ops []store.Op) ([]store.Event, error) {
	meta := tx.Bucket(metaBucket)
	objects := tx.Bucket(objectsBucket)
	rev := revision(meta)

	// Decide: each op against the stored record or, for a key an earlier op of this Txn wrote,
	// that op's outcome (nil: deleted).
	type key struct{ kind, name string }
	written := map[key]*store.Record{}
	events := make([]store.Event, 0, len(ops))
	for _, op := range ops {
		k := key{op.Kind, op.Name}
		cur, ok := written[k]
		if !ok {
			if b := objects.Bucket([]byte(op.Kind)); b != nil {
				if v := b.Get([]byte(op.Name)); v != nil {
					rec, err := decode(op.Kind, op.Name, v)
					if err != nil {
						return nil, err
					}
					cur = &rec
				}
			}
		}
		rev++
		e, err := store.Apply(op, cur, rev)
		if err != nil {
			return nil, err
		}
		if e.Type == store.Deleted {
			written[k] = nil
		} else {
			written[k] = &e.Record
		}
		events = append(events, e)
	}

	// Write, in op order.
	for _, e := range events {
		r := e.Record
		b, err := objects.CreateBucketIfNotExists([]byte(r.Kind))
		if err == nil {
			if e.Type == store.Deleted {
				err = b.Delete([]byte(r.Name))
			} else {
				err = b.Put([]byte(r.Name), encode(r))
			}
		}
		if err != nil {
			return nil, fmt.Errorf("write %s/%s: %w", r.Kind, r.Name, err)
		}
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

// Close implements store.Store. Txns already taken by the committer are committed first.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	close(s.stop)
	<-s.committerDone
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
