// Package store is herd's durable state: objects of a few kinds, stored as JSON under kind/name,
// each write stamped with a resource version from one counter that only grows. Updates and deletes
// can be made conditional on the version the writer read (optimistic concurrency), several writes
// can be committed together (Txn), and watchers receive every change after a version.
//
// Revisions only grow, and the store's revision is the revision of its latest write. A Txn's
// writes take revisions after the store's revision before it, in op order: bolt and memory give
// each op the next revision of its own, etcd gives every op of a Txn the Txn's one revision (an
// etcd transaction is one revision), and an etcd shared with other programs skips the numbers
// their writes take. So a watcher may see several events of one revision, and one that resumes
// must resume after the last revision it saw in full (or list again, as herd's watchers do); and
// an op cannot be made conditional on the version an earlier op of the same Txn writes (CheckOps
// refuses it), since under etcd that version is known only once the Txn commits.
//
// Implementations: bolt (bbolt on disk, the default), etcd (an etcd cluster, for a control plane
// that survives the loss of a machine) and memory (for tests). All pass storetest.
package store

import (
	"context"
	"errors"
)

// Errors every implementation returns, wrapped with context; test them with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrExists   = errors.New("already exists")
	// ErrConflict means the object changed since the writer read it: read again and retry.
	ErrConflict = errors.New("conflict: the object was changed by someone else")
	// ErrCompacted means a watch asked for changes older than the store still remembers: list again.
	ErrCompacted = errors.New("requested resource version is too old: list again")
	ErrClosed    = errors.New("store is closed")
	// ErrUnavailable means the store cannot answer now (etcd without quorum): nothing was
	// decided, or, for a write, its outcome is unknown. Retry later; nothing needs to be undone.
	ErrUnavailable = errors.New("store unavailable")
	// ErrFenced means a write was refused because the writer no longer holds the leadership it
	// was made under (see etcd's Store.Fenced): another replica leads, and this one must stop.
	ErrFenced = errors.New("not the leader any more: write refused")
)

// Record is one stored object. The Value of a record handed out by Watch is shared with other
// watchers: read it, do not modify it.
type Record struct {
	Kind string
	Name string
	// Value is the object's JSON.
	Value []byte
	// ResourceVersion is the store revision of the write that produced this record.
	ResourceVersion int64
}

// OpType is what a write does.
type OpType int

// Write operations.
const (
	OpCreate OpType = iota // fails with ErrExists if the key exists; ResourceVersion must be 0
	OpUpdate               // fails with ErrNotFound if it does not, ErrConflict on a version mismatch
	OpPut                  // creates or replaces; with ResourceVersion set, it is an OpUpdate
	OpDelete               // fails with ErrNotFound if missing, ErrConflict on a version mismatch
)

// Op is one write of a transaction. Kind and Name must not be empty.
type Op struct {
	Type OpType
	Kind string
	Name string
	// Value is the object's JSON; the store keeps its own copy. Ignored by OpDelete.
	Value []byte
	// ResourceVersion, when not 0, must equal the stored record's version or the whole
	// transaction fails with ErrConflict.
	ResourceVersion int64
}

// EventType says what a watch event reports.
type EventType int

// Watch event types.
const (
	Added EventType = iota
	Modified
	Deleted
)

func (t EventType) String() string {
	return [...]string{"Added", "Modified", "Deleted"}[t]
}

// Event is one change seen by a watch. For Deleted, Record holds the last value and the version of
// the delete.
type Event struct {
	Type   EventType
	Record Record
}

// Store is herd's state. Every method is safe for concurrent use.
type Store interface {
	// Get returns one record or ErrNotFound.
	Get(ctx context.Context, kind, name string) (Record, error)
	// List returns every record of a kind, sorted by name, and the store revision it reflects;
	// a watch from that revision sees every later change.
	List(ctx context.Context, kind string) ([]Record, int64, error)
	// Txn commits every op or none of them and returns one record per op (for Delete, the deleted
	// record stamped with the delete's revision). Ops apply in order, so a later op sees an earlier
	// one's write to the same key. A failed op's error names its kind and name; when several would
	// fail, it is the first in order.
	Txn(ctx context.Context, ops ...Op) ([]Record, error)
	// Watch delivers, in revision order and each once, every change to kind ("" for all kinds)
	// after revision since (the changes of one Txn in op order; a store may deliver only a Txn's
	// net change to a key it writes more than once); a since beyond the store's revision just
	// skips the changes up to it. The channel is closed when ctx ends, the store closes or the
	// watcher falls too far behind (more than the store's watch history, DefaultWatchHistory
	// changes), and by etcd when it ends the watch: writers never wait for a watcher. Callers then
	// watch again from the last revision they saw in full, or list and watch again.
	// ErrCompacted if since is older than the store remembers: older than its history, or older
	// than its revision when it was opened, or compacted away by etcd.
	Watch(ctx context.Context, kind string, since int64) (<-chan Event, error)
	// Close releases the store; calling it again does nothing. Watch channels are closed, and
	// every other method then fails with ErrClosed.
	Close() error
}

// TxnLimiter MAY be implemented by a Store that refuses a Txn of more than some number of ops
// (etcd's --max-txn-ops). Writers that can split their writes into several Txns, such as the
// controller writing a fleet's instance records, keep each Txn within it.
type TxnLimiter interface {
	// MaxTxnOps is the most ops one Txn may hold; 0 means no limit.
	MaxTxnOps() int
}

// MaxTxnOps returns s's limit on the ops of one Txn, or 0 when it has none.
func MaxTxnOps(s Store) int {
	if l, ok := s.(TxnLimiter); ok {
		return l.MaxTxnOps()
	}
	return 0
}

// Create stores a new record.
func Create(ctx context.Context, s Store, kind, name string, value []byte) (Record, error) {
	recs, err := s.Txn(ctx, Op{Type: OpCreate, Kind: kind, Name: name, Value: value})
	if err != nil {
		return Record{}, err
	}
	return recs[0], nil
}

// Update replaces a record if its version is still rv (0: whatever it is).
func Update(ctx context.Context, s Store, kind, name string, value []byte, rv int64) (Record, error) {
	recs, err := s.Txn(ctx, Op{Type: OpUpdate, Kind: kind, Name: name, Value: value, ResourceVersion: rv})
	if err != nil {
		return Record{}, err
	}
	return recs[0], nil
}

// Delete removes a record if its version is still rv (0: whatever it is).
func Delete(ctx context.Context, s Store, kind, name string, rv int64) error {
	_, err := s.Txn(ctx, Op{Type: OpDelete, Kind: kind, Name: name, ResourceVersion: rv})
	return err
}
