// Package leader chooses which of several `herd up` replicas sharing one etcd runs the controller:
// an etcd election (go.etcd.io/etcd/client/v3/concurrency) on a session whose lease lives TTL
// seconds without renewal.
//
// Every replica campaigns all the time. The one whose key under the election prefix is the oldest
// leads: Run calls its lead function with a context that ends the moment the replica's session is
// lost (its lease expired or was revoked, or etcd stopped answering for a TTL), or its election key
// is deleted, so that the controller stops at once and the replica campaigns again with a new
// session. A leader that stops cleanly resigns, so that the next takes over without waiting for
// the lease to run out.
//
// What a leader does outside etcd is fenced by its Term: the store writes of the controller go
// through a store view conditional on the term's key and create revision (etcd.Store.Fenced), and
// Term.Check confirms with a linearizable read, just before a provider call, that the term still
// holds.
package leader

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultTTL is the session's lease TTL in seconds. etcd raises a shorter TTL to its own minimum,
// 1.5 election timeouts rounded up (2 s with etcd's default 1 s election timeout), so 2 s is what
// a default etcd gives; a cluster run with --election-timeout=500 accepts 1.
const DefaultTTL = 2

// ErrLostLeadership means a term no longer holds: another replica may lead.
var ErrLostLeadership = errors.New("this replica no longer leads")

// Replica names a herd up replica: what the election key holds, and what /v1/status shows.
type Replica struct {
	// Name identifies the replica, e.g. host:port of its API.
	Name string `json:"name"`
	// API is the URL of the replica's API.
	API string `json:"api"`
}

// Options configure an Elector.
type Options struct {
	Client *clientv3.Client
	// Prefix is the election's key prefix, e.g. "/herd-leader/". Required.
	Prefix string
	// TTL is the session lease's TTL in seconds: how long a dead leader holds the leadership
	// before another replica takes over. Default: DefaultTTL.
	TTL int
	// Self is this replica.
	Self Replica
	// RetryInterval is the pause after a failed attempt to campaign (etcd without quorum).
	// Default: 500ms.
	RetryInterval time.Duration
	Logger        *slog.Logger
}

// Elector campaigns for this replica. Create it with New and run it with Run.
type Elector struct {
	opts  Options
	log   *slog.Logger
	value string
}

// New checks opts and returns an Elector.
func New(opts Options) (*Elector, error) {
	if opts.Client == nil {
		return nil, errors.New("leader: an etcd client is required")
	}
	if opts.Prefix == "" {
		return nil, errors.New("leader: an election prefix is required")
	}
	if opts.Self.Name == "" {
		return nil, errors.New("leader: the replica needs a name")
	}
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.RetryInterval <= 0 {
		opts.RetryInterval = 500 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	v, err := json.Marshal(opts.Self)
	if err != nil {
		return nil, err
	}
	return &Elector{opts: opts, log: opts.Logger.With("component", "leader", "replica", opts.Self.Name), value: string(v)}, nil
}

// Term is one spell of leadership: the election key this replica holds and its create revision,
// which no later key of the election can have.
type Term struct {
	Key string
	Rev int64
	// Since is when the term began.
	Since time.Time
	ctx   context.Context
	cli   *clientv3.Client
}

// Check confirms that the term still holds: its context is live and, by a linearizable read,
// its key still exists with its create revision. A replica calls it just before doing what only
// the leader may do outside etcd (asking a provider to create or delete an instance).
func (t *Term) Check(ctx context.Context) error {
	if t.ctx.Err() != nil {
		return fmt.Errorf("%w: the term that began at %s has ended", ErrLostLeadership, t.Since.Format(time.RFC3339Nano))
	}
	resp, err := t.cli.Get(ctx, t.Key)
	if err != nil {
		return fmt.Errorf("%w: cannot confirm the leader key %s: %v", ErrLostLeadership, t.Key, err)
	}
	if len(resp.Kvs) != 1 || resp.Kvs[0].CreateRevision != t.Rev {
		return fmt.Errorf("%w: the leader key %s is gone", ErrLostLeadership, t.Key)
	}
	return nil
}

// Run campaigns until ctx ends. Each time this replica wins, it calls lead with a context that
// ends when the term does (or ctx does) and waits for lead to return; lead must return soon
// after its context ends. Run returns nil once ctx has ended and the last term was resigned.
func (e *Elector) Run(ctx context.Context, lead func(ctx context.Context, t *Term)) error {
	for ctx.Err() == nil {
		if err := e.campaignOnce(ctx, lead); err != nil && ctx.Err() == nil {
			e.log.Warn("leader election: retrying", "err", err, "retry_in", e.opts.RetryInterval.String())
			select {
			case <-ctx.Done():
			case <-time.After(e.opts.RetryInterval):
			}
		}
	}
	return nil
}

// campaignOnce runs one session: campaign, lead until the session is lost or ctx ends, resign.
func (e *Elector) campaignOnce(ctx context.Context, lead func(ctx context.Context, t *Term)) error {
	session, err := concurrency.NewSession(e.opts.Client, concurrency.WithTTL(e.opts.TTL), concurrency.WithContext(ctx))
	if err != nil {
		return fmt.Errorf("start an etcd session: %w", err)
	}
	defer func() {
		// Revoking the lease deletes the campaign key at once: a clean stop hands over now.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if _, err := e.opts.Client.Revoke(rctx, session.Lease()); err != nil {
			e.log.Debug("revoke session lease", "err", err)
		}
		_ = session.Close()
	}()
	// The term's context ends when the session does; a campaign waiting for its turn stops too.
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-session.Done():
			cancel()
		case <-sctx.Done():
		}
	}()
	el := concurrency.NewElection(session, e.opts.Prefix)
	e.log.Info("campaigning", "lease", fmt.Sprintf("%x", session.Lease()), "ttl_s", e.opts.TTL)
	if err := el.Campaign(sctx, e.value); err != nil {
		return fmt.Errorf("campaign: %w", err)
	}
	term := &Term{Key: el.Key(), Rev: el.Rev(), Since: time.Now(), ctx: sctx, cli: e.opts.Client}
	// A session lost while waiting could leave Campaign believing it won with a key that is gone.
	cctx, ccancel := context.WithTimeout(sctx, time.Duration(e.opts.TTL)*time.Second)
	err = term.Check(cctx)
	ccancel()
	if err != nil {
		return err
	}
	go e.watchKey(sctx, cancel, term)
	e.log.Info("leading", "key", term.Key, "rev", term.Rev)
	lead(sctx, term)
	if ctx.Err() == nil {
		e.log.Warn("lost the leadership: stopped acting, campaigning again", "led_for", time.Since(term.Since).String())
		return nil
	}
	e.log.Info("stepped down", "led_for", time.Since(term.Since).String())
	return nil
}

// watchKey ends the term (cancel) as soon as its key is deleted (its lease expired or was
// revoked), which can come before the session notices. When etcd ends the watch (the member lost
// its own leader, say) the key is read again: the term goes on if it still holds.
func (e *Elector) watchKey(ctx context.Context, cancel context.CancelFunc, t *Term) {
	defer cancel()
	for ctx.Err() == nil {
		wch := e.opts.Client.Watch(clientv3.WithRequireLeader(ctx), t.Key, clientv3.WithRev(t.Rev))
		for resp := range wch {
			if resp.Err() != nil || resp.Canceled {
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					e.log.Warn("the leader key was deleted: stepping down", "key", t.Key)
					return
				}
			}
		}
		cctx, ccancel := context.WithTimeout(ctx, time.Duration(e.opts.TTL)*time.Second)
		err := t.Check(cctx)
		ccancel()
		if err != nil {
			if ctx.Err() == nil {
				e.log.Warn("cannot confirm the leadership: stepping down", "err", err)
			}
			return
		}
	}
}

// Leader returns the replica that leads: the holder of the election's oldest key.
func Leader(ctx context.Context, cli *clientv3.Client, prefix string) (Replica, bool, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithFirstCreate()...)
	if err != nil {
		return Replica{}, false, err
	}
	if len(resp.Kvs) == 0 {
		return Replica{}, false, nil
	}
	var r Replica
	if err := json.Unmarshal(resp.Kvs[0].Value, &r); err != nil {
		return Replica{}, false, fmt.Errorf("leader key %s: %w", resp.Kvs[0].Key, err)
	}
	return r, true, nil
}

// Replicas returns every replica campaigning under prefix, the leader first: each holds a key
// while its session lives.
func Replicas(ctx context.Context, cli *clientv3.Client, prefix string) ([]Replica, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	out := make([]Replica, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r Replica
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			return nil, fmt.Errorf("replica key %s: %w", kv.Key, err)
		}
		out = append(out, r)
	}
	return out, nil
}
