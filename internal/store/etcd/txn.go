package etcd

import (
	"context"
	"fmt"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"herd.dev/herd/internal/store"
)

// keyPlan is what a Txn does to one key: the compare that its first op needs, and the key's
// value after the Txn (absent: deleted).
type keyPlan struct {
	key    string
	first  store.Op
	value  []byte
	absent bool
}

// requestOverhead is a generous estimate of the bytes etcd's encoding adds to each key of a Txn
// (field tags, lengths, the compare's target), so that the size check errs on the safe side.
const requestOverhead = 32

// Txn implements store.Store; the package comment says how ops map to one etcd transaction.
func (s *Store) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	return s.txn(ctx, nil, ops)
}

// txn is Txn, with the fence's compare added when f is not nil.
func (s *Store) txn(ctx context.Context, f *fence, ops []store.Op) ([]store.Record, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("txn: %w", store.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("txn: %w", err)
	}
	if err := store.CheckOps(ops); err != nil {
		return nil, err
	}
	if len(ops) == 0 {
		return []store.Record{}, nil
	}
	plans, doomed, err := s.plan(ops)
	if err != nil {
		return nil, err
	}
	if limit := s.maxTxnOps(f); len(plans) > limit {
		why := "the server's --max-txn-ops"
		if f != nil {
			why += ", less one for the leader's fence"
		}
		return nil, fmt.Errorf("txn of %d ops writes %d keys, over etcd's limit of %d per transaction (%s): write fewer at a time",
			len(ops), len(plans), limit, why)
	}
	var cmps []clientv3.Cmp
	writes := make([]clientv3.Op, 0, len(plans))
	reads := make([]clientv3.Op, 0, len(plans))
	for _, p := range plans {
		if c, ok := compareFor(p); ok {
			cmps = append(cmps, c)
		}
		if p.absent {
			writes = append(writes, clientv3.OpDelete(p.key, clientv3.WithPrevKV()))
		} else {
			writes = append(writes, clientv3.OpPut(p.key, string(p.value), clientv3.WithPrevKV()))
		}
		reads = append(reads, clientv3.OpGet(p.key))
	}
	rctx, cancel := s.request(ctx)
	defer cancel()
	if doomed {
		// Some op fails whatever the store holds: read the keys and let the replay name it.
		resp, err := s.cli.Txn(rctx).Then(reads...).Commit()
		if err != nil {
			return nil, fmt.Errorf("txn: %w", s.unavailable(ctx, err))
		}
		return nil, s.failure(ops, plans, resp.Responses)
	}
	if f != nil {
		// The fence is the last compare and its key the last read, after the plans' own.
		cmps = append(cmps, f.compare())
		reads = append(reads, clientv3.OpGet(f.key))
	}
	resp, err := s.cli.Txn(rctx).If(cmps...).Then(writes...).Else(reads...).Commit()
	if err != nil {
		return nil, fmt.Errorf("txn: %w", s.unavailable(ctx, err))
	}
	if !resp.Succeeded {
		if f != nil && !f.holds(resp.Responses[len(plans)]) {
			return nil, f.refused(len(ops))
		}
		return nil, s.failure(ops, plans, resp.Responses)
	}
	// Replay the ops on the values the writes replaced, which is what the compares held to:
	// that gives every op its record, a delete's last value included.
	before := map[string]*store.Record{}
	for i, p := range plans {
		var prev *mvccpb.KeyValue
		if r := resp.Responses[i].GetResponsePut(); r != nil {
			prev = r.PrevKv
		} else if r := resp.Responses[i].GetResponseDeleteRange(); r != nil && len(r.PrevKvs) > 0 {
			prev = r.PrevKvs[0]
		}
		if prev != nil {
			before[p.key] = &store.Record{Value: prev.Value, ResourceVersion: prev.ModRevision}
		}
	}
	rev := resp.Header.Revision
	events, err := store.ApplyAll(ops, s.lookup(before), func(int) int64 { return rev })
	if err != nil {
		return nil, fmt.Errorf("etcd store: txn committed at revision %d does not replay on the values it replaced (a bug in the store): %v", rev, err)
	}
	recs := make([]store.Record, len(events))
	for i, e := range events {
		recs[i] = e.Record
	}
	return recs, nil
}

// plan groups ops by key, in the order keys first appear, and works out each key's value after
// the Txn, assuming each key's first op succeeds. doomed means a later op fails even then (a
// create of a key an earlier op created, say). It also refuses what etcd would refuse.
func (s *Store) plan(ops []store.Op) (plans []*keyPlan, doomed bool, err error) {
	byKey := map[string]*keyPlan{}
	size := 0
	for i, op := range ops {
		if strings.Contains(op.Kind, "/") {
			return nil, false, fmt.Errorf("txn op %d (%s %s/%s): kind contains /, which would mix its keys with another kind's", i, op.Type, op.Kind, op.Name)
		}
		k := s.key(op.Kind, op.Name)
		if n := len(k) + len(op.Value) + requestOverhead; n > s.cfg.MaxRequestBytes {
			return nil, false, fmt.Errorf("txn op %d (%s %s/%s): %d bytes, over etcd's request limit of %d bytes (the server's --max-request-bytes): store less in one object",
				i, op.Type, op.Kind, op.Name, n, s.cfg.MaxRequestBytes)
		}
		p, seen := byKey[k]
		if !seen {
			p = &keyPlan{key: k, first: op}
			byKey[k] = p
			plans = append(plans, p)
			p.absent = op.Type == store.OpDelete
			p.value = op.Value
			size += 3*len(k) + requestOverhead // compare, write and read of the key
			continue
		}
		var cur *store.Record
		if !p.absent {
			cur = &store.Record{Kind: op.Kind, Name: op.Name, Value: p.value}
		}
		e, err := store.Apply(op, cur, 0)
		if err != nil {
			doomed = true
			continue
		}
		p.absent = e.Type == store.Deleted
		p.value = nil
		if !p.absent {
			p.value = e.Record.Value
		}
	}
	for _, p := range plans {
		size += len(p.value)
	}
	if size > s.cfg.MaxRequestBytes {
		return nil, false, fmt.Errorf("txn of %d ops is about %d bytes, over etcd's request limit of %d bytes (the server's --max-request-bytes): write fewer at a time",
			len(ops), size, s.cfg.MaxRequestBytes)
	}
	return plans, doomed, nil
}

// compareFor returns what must hold of p's key before the Txn for p's first op to succeed, as
// store.Apply decides it; false when the op succeeds whatever the key holds (an unconditional put).
func compareFor(p *keyPlan) (clientv3.Cmp, bool) {
	op := p.first
	switch {
	case op.Type == store.OpCreate:
		return clientv3.Compare(clientv3.Version(p.key), "=", 0), true
	case op.ResourceVersion != 0:
		// A missing key's mod revision is 0, which no version a writer read can be.
		return clientv3.Compare(clientv3.ModRevision(p.key), "=", op.ResourceVersion), true
	case op.Type == store.OpPut:
		return clientv3.Cmp{}, false
	default: // update or delete of whatever is stored
		return clientv3.Compare(clientv3.Version(p.key), ">", 0), true
	}
}

// failure replays ops on the keys as the failed Txn read them and returns the error of the first
// op that fails, which names it, as the other stores do.
func (s *Store) failure(ops []store.Op, plans []*keyPlan, reads []*pb.ResponseOp) error {
	before := map[string]*store.Record{}
	for i, p := range plans {
		if r := reads[i].GetResponseRange(); r != nil && len(r.Kvs) > 0 {
			before[p.key] = &store.Record{Value: r.Kvs[0].Value, ResourceVersion: r.Kvs[0].ModRevision}
		}
	}
	_, err := store.ApplyAll(ops, s.lookup(before), func(int) int64 { return 0 })
	if err == nil {
		return fmt.Errorf("etcd store: txn of %d ops failed its compares, yet they hold on the values it read (a bug in the store)", len(ops))
	}
	return err
}

// lookup returns the stored-record function of store.ApplyAll over records keyed by etcd key.
func (s *Store) lookup(recs map[string]*store.Record) func(kind, name string) *store.Record {
	return func(kind, name string) *store.Record {
		r := recs[s.key(kind, name)]
		if r == nil {
			return nil
		}
		return &store.Record{Kind: kind, Name: name, Value: r.Value, ResourceVersion: r.ResourceVersion}
	}
}
