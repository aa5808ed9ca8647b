package etcd

import "herd.dev/herd/internal/store"

var _ store.TxnLimiter = (*Store)(nil)

// MaxTxnOps implements store.TxnLimiter: the most keys one Txn may write (Config.MaxTxnOps), so
// that writers split bigger batches rather than have them refused.
func (s *Store) MaxTxnOps() int { return s.cfg.MaxTxnOps }
