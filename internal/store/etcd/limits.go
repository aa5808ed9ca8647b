package etcd

import "herd.dev/herd/internal/store"

var _ store.TxnLimiter = (*Store)(nil)

// MaxTxnOps implements store.TxnLimiter: the most keys one Txn may write (Config.MaxTxnOps), so
// that writers split bigger batches rather than have them refused.
func (s *Store) MaxTxnOps() int { return s.maxTxnOps(nil) }

// MaxTxnOps of a fenced store is one less: the fence is one more compare and one more read in
// every Txn, and etcd counts those against the same limit.
func (f *fencedStore) MaxTxnOps() int { return f.maxTxnOps(&f.fence) }

func (s *Store) maxTxnOps(f *fence) int {
	if f != nil {
		return s.cfg.MaxTxnOps - 1
	}
	return s.cfg.MaxTxnOps
}
