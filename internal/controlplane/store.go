package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/bolt"
	"herd.dev/herd/internal/store/etcd"
)

// The stores herd up can run on.
const (
	// StoreBolt is an embedded bbolt file in the data directory: the default, for one machine.
	StoreBolt = "bolt"
	// StoreEtcd is an etcd cluster, for state that survives the loss of a machine.
	StoreEtcd = "etcd"
)

// openStore opens the store opts.Store names.
func openStore(ctx context.Context, opts Options, log *slog.Logger) (store.Store, error) {
	switch opts.Store {
	case "", StoreBolt:
		st, err := bolt.Open(filepath.Join(opts.DataDir, "state.db"))
		if err != nil {
			return nil, fmt.Errorf("open store in %s: %w", opts.DataDir, err)
		}
		return st, nil
	case StoreEtcd:
		cfg := opts.Etcd
		cfg.Logger = log
		return etcd.New(ctx, cfg)
	}
	return nil, checkStoreName(opts.Store)
}

// checkStoreName says what is wrong with a store name, so that Run refuses it before it changes
// anything.
func checkStoreName(name string) error {
	switch name {
	case "", StoreBolt, StoreEtcd:
		return nil
	}
	return fmt.Errorf("--store %q: use %s (the default, a file in --data-dir) or %s (with --etcd-endpoints)", name, StoreBolt, StoreEtcd)
}
