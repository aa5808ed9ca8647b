package etcd

import (
	"context"
	"fmt"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"herd.dev/herd/internal/store"
)

// fence is the condition of a fenced store's writes: key still exists with create revision rev.
// A leader election's key is created when its holder campaigns and deleted when its lease ends,
// so no later holder's key can have the same create revision.
type fence struct {
	key string
	rev int64
}

func (f *fence) compare() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(f.key), "=", f.rev)
}

// holds reports whether the fence key, as the failed Txn read it, still satisfies the fence.
func (f *fence) holds(read *pb.ResponseOp) bool {
	r := read.GetResponseRange()
	return r != nil && len(r.Kvs) == 1 && r.Kvs[0].CreateRevision == f.rev
}

func (f *fence) refused(ops int) error {
	return fmt.Errorf("txn of %d ops: leader key %s no longer has create revision %d: %w", ops, f.key, f.rev, store.ErrFenced)
}

// Fenced returns a view of s whose writes commit only while key exists with create revision rev
// (in the same etcd transaction, so no write can slip in after the key is gone); otherwise they
// fail with store.ErrFenced and change nothing. Reads and watches are s's own. The controller of
// the replica that leads writes through it, with its election key and that key's create
// revision, so that a replica that lost its leadership and has not noticed yet cannot write.
// Closing the view does nothing: s belongs to whoever opened it.
func (s *Store) Fenced(key string, rev int64) store.Store {
	return &fencedStore{Store: s, fence: fence{key: key, rev: rev}}
}

type fencedStore struct {
	*Store
	fence fence
}

// Txn implements store.Store, with the fence.
func (f *fencedStore) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	return f.txn(ctx, &f.fence, ops)
}

// Close implements store.Store; the underlying store stays open.
func (f *fencedStore) Close() error { return nil }
