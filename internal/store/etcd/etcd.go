// Package etcd is a store.Store on an etcd cluster, so that herd's state survives the loss of any
// one machine: it passes the same storetest suite as the bolt and memory stores.
//
// Layout: the record kind/name lives at the key Prefix+kind+"/"+name (Prefix defaults to
// "/herd/", so herd can share an etcd with others), its value is the object's JSON, and its
// resource version is the key's mod revision. List returns the revision of the etcd read.
//
// A Txn is one etcd transaction. Each key's first op in the Txn becomes a compare (create:
// version == 0; update and delete: version > 0, or mod_revision == the version the writer read),
// the Txn's effect on each key becomes one put or delete, and the failure branch reads every key,
// so that when a compare fails the ops are replayed on what was read to name the op that failed,
// with the same error the other stores return. Both answers take one round trip.
//
// etcd gives a transaction one revision, not one per op: every record a Txn writes carries the
// Txn's revision, and a watcher sees the Txn's changes as events of that one revision. The store
// contract allows this (see package store); nothing in herd needs an op's own revision.
//
// Watches are etcd watches from since+1, with the previous value for deletes. When etcd has
// compacted the revisions a Watch asks for, Watch fails with store.ErrCompacted; a watch that
// etcd cancels later (compaction, a lost leader) has its channel closed, and the caller lists
// again. Compaction itself is left to etcd (--auto-compaction-retention) or its operator.
//
// Reads are linearizable (etcd's default), so a member cut off from the quorum fails a read
// rather than serve stale data. Every request is bounded by RequestTimeout; a request etcd cannot
// serve (no leader, no quorum, no answer in time) fails with a *NoQuorumError, which is a
// store.ErrUnavailable and says "etcd has no quorum" and what to do.
//
// Fenced returns a view of the store whose writes commit only while an etcd key (a leader
// election's key) still has the create revision it had when leadership was won.
//
// Requests are bounded before they are sent: a Txn over MaxTxnOps keys or MaxRequestBytes fails
// with an error that says so, instead of an etcd error after the fact.
package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"herd.dev/herd/internal/store"
)

var _ store.Store = (*Store)(nil)

// Defaults of Config, matching an etcd server's own defaults so that a Txn the store accepts is
// one the server accepts.
const (
	DefaultPrefix = "/herd/"
	// DefaultMaxTxnOps is etcd's --max-txn-ops default.
	DefaultMaxTxnOps = 128
	// DefaultMaxRequestBytes is etcd's --max-request-bytes default (1.5 MiB).
	DefaultMaxRequestBytes = 1536 * 1024
	// DefaultDialTimeout bounds the connection check of New.
	DefaultDialTimeout = 5 * time.Second
)

// Config says which etcd to use and how.
type Config struct {
	// Endpoints are the client URLs of the etcd members (http:// or https://). Required.
	Endpoints []string
	// Prefix is put before every key. Default: DefaultPrefix.
	Prefix string
	// CAFile verifies the members' certificates; CertFile and KeyFile are this client's
	// certificate and key (both or neither). Default: none (plain connections, or the system's
	// roots for https endpoints).
	CAFile, CertFile, KeyFile string
	// Username and Password authenticate to etcd (both or neither). Default: no authentication.
	Username, Password string
	// DialTimeout bounds New's check that the cluster answers. Default: DefaultDialTimeout.
	DialTimeout time.Duration
	// RequestTimeout bounds each read and write; one that etcd has not answered by then fails
	// with a *NoQuorumError (store.ErrUnavailable). Default: DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxTxnOps is the most keys one Txn may write: set it to the server's --max-txn-ops.
	// Default: DefaultMaxTxnOps.
	MaxTxnOps int
	// MaxRequestBytes bounds a Txn's encoded size: set it to the server's --max-request-bytes.
	// Default: DefaultMaxRequestBytes.
	MaxRequestBytes int
	// WatchHistory is how many events a watcher may fall behind before it is dropped.
	// Default: store.DefaultWatchHistory.
	WatchHistory int
	// Logger receives the store's own messages. Default: discard.
	Logger *slog.Logger
}

// Store is a store.Store on etcd. Open it with New.
type Store struct {
	cfg    Config
	cli    *clientv3.Client
	log    *slog.Logger
	closed atomic.Bool
	// stop ends every watch when the store closes; watches counts their goroutines.
	stop      context.Context
	cancel    context.CancelFunc
	watches   sync.WaitGroup
	closeOnce sync.Once
}

// New connects to etcd and checks that the cluster answers a read within cfg.DialTimeout, so
// that a wrong endpoint or credential fails here rather than at the first write.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	ccfg := clientv3.Config{
		Endpoints:   cfg.Endpoints,
		DialTimeout: cfg.DialTimeout,
		Username:    cfg.Username,
		Password:    cfg.Password,
		Logger:      zap.NewNop(),
		// Keepalives notice a dead member's connection within seconds, also while a watch is idle.
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	}
	tlsInfo := transport.TLSInfo{TrustedCAFile: cfg.CAFile, CertFile: cfg.CertFile, KeyFile: cfg.KeyFile}
	if cfg.CAFile != "" || cfg.CertFile != "" {
		tc, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd store: TLS: %w", err)
		}
		ccfg.TLS = tc
	}
	cli, err := clientv3.New(ccfg)
	if err != nil {
		return nil, fmt.Errorf("etcd store: connect to %v: %w", cfg.Endpoints, err)
	}
	cctx, cancel := context.WithTimeout(ctx, cfg.DialTimeout)
	defer cancel()
	if _, err := cli.Get(cctx, cfg.Prefix, clientv3.WithCountOnly()); err != nil {
		_ = cli.Close()
		return nil, fmt.Errorf("etcd store: etcd at %s does not answer a read within %s: %w",
			strings.Join(cfg.Endpoints, ","), cfg.DialTimeout, err)
	}
	log := cfg.Logger.With("component", "store", "store", "etcd")
	log.Info("connected to etcd", "endpoints", cfg.Endpoints, "prefix", cfg.Prefix)
	stop, cancelStop := context.WithCancel(context.Background())
	return &Store{cfg: cfg, cli: cli, log: log, stop: stop, cancel: cancelStop}, nil
}

// defaults checks c and fills in its defaults.
func (c *Config) defaults() error {
	var problems []string
	if len(c.Endpoints) == 0 {
		problems = append(problems, "Endpoints is empty: give the client URLs of the etcd members")
	}
	for _, ep := range c.Endpoints {
		if strings.TrimSpace(ep) == "" {
			problems = append(problems, "Endpoints has an empty entry")
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		problems = append(problems, "CertFile and KeyFile go together: give both or neither")
	}
	if (c.Username == "") != (c.Password == "") {
		problems = append(problems, "Username and Password go together: give both or neither")
	}
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(c.Prefix, "/") {
		problems = append(problems, fmt.Sprintf("Prefix %q must end with /, so that it cannot be the start of another prefix's keys", c.Prefix))
	}
	if len(problems) > 0 {
		return fmt.Errorf("etcd store: %s", strings.Join(problems, "; "))
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.RequestTimeout <= 0 {
		c.RequestTimeout = DefaultRequestTimeout
	}
	if c.MaxTxnOps <= 0 {
		c.MaxTxnOps = DefaultMaxTxnOps
	}
	if c.MaxRequestBytes <= 0 {
		c.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if c.WatchHistory <= 0 {
		c.WatchHistory = store.DefaultWatchHistory
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// key is the etcd key of kind/name; kindPrefix the prefix of every key of kind ("" for all).
func (s *Store) key(kind, name string) string { return s.kindPrefix(kind) + name }

func (s *Store) kindPrefix(kind string) string {
	if kind == "" {
		return s.cfg.Prefix
	}
	return s.cfg.Prefix + kind + "/"
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, kind, name string) (store.Record, error) {
	if s.closed.Load() {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, store.ErrClosed)
	}
	rctx, cancel := s.request(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, s.key(kind, name))
	if err != nil {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, s.unavailable(ctx, err))
	}
	if len(resp.Kvs) == 0 {
		return store.Record{}, fmt.Errorf("get %s/%s: %w", kind, name, store.ErrNotFound)
	}
	kv := resp.Kvs[0]
	return store.Record{Kind: kind, Name: name, Value: kv.Value, ResourceVersion: kv.ModRevision}, nil
}

// List implements store.Store. etcd returns the keys in byte order, which is the names' order.
func (s *Store) List(ctx context.Context, kind string) ([]store.Record, int64, error) {
	if s.closed.Load() {
		return nil, 0, fmt.Errorf("list %s: %w", kind, store.ErrClosed)
	}
	p := s.kindPrefix(kind)
	rctx, cancel := s.request(ctx)
	defer cancel()
	resp, err := s.cli.Get(rctx, p, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("list %s: %w", kind, s.unavailable(ctx, err))
	}
	recs := make([]store.Record, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		name := strings.TrimPrefix(string(kv.Key), p)
		recs = append(recs, store.Record{Kind: kind, Name: name, Value: kv.Value, ResourceVersion: kv.ModRevision})
	}
	return recs, resp.Header.Revision, nil
}

// Client returns the store's etcd client, for what herd keeps in etcd beside the records:
// leader election among herd up replicas (internal/leader).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Prefix returns the prefix of the store's keys.
func (s *Store) Prefix() string { return s.cfg.Prefix }

// Close implements store.Store: it ends every watch, then closes the etcd client.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		s.cancel()
		s.watches.Wait()
		err = s.cli.Close()
		if errors.Is(err, context.Canceled) {
			err = nil
		}
	})
	return err
}
