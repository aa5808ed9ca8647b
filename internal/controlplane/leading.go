package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/lbsync"
	"herd.dev/herd/internal/leader"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/etcd"
)

// The controller and the autoscaler are the control plane's writers: they run in one replica at
// a time, for a term. On bolt there is one process and one term, as long as herd up runs. On etcd
// every replica campaigns (internal/leader); the one that wins runs a new controller and
// autoscaler on a store fenced by its term and on providers that confirm the term before each
// create and delete, and stops them the moment the term ends. A replica that does not lead
// configures its load balancer from the store (lbsync's Follow), so every replica's data plane
// serves, and keeps serving its last configuration through a change of leader.

// leading runs the terms and offers what the rest of herd up reads of the controller of the term
// in progress (none on a replica that does not lead).
type leading struct {
	deps termDeps
	log  *slog.Logger

	mu   sync.Mutex
	ctrl *controller.Controller
	// past adds up the counters of earlier terms' controllers, so that metrics only grow.
	pastReconciles, pastErrors int64
	since                      time.Time

	// On etcd: the elector, the store followed between terms, and this replica.
	elector *leader.Elector
	etcd    *etcd.Store
	self    leader.Replica
	isLead  atomic.Bool
}

// termDeps is what each term's controller and autoscaler are built from.
type termDeps struct {
	store     store.Store
	providers map[string]provider.Provider
	ctrl      controller.Options // without Store and Providers
	scaler    autoscaler.LoopOptions
	targets   *lbsync.Sync
	// claims, when set, routes the load balancer's claims of tenants without an instance to the
	// term's controller (nil: to nobody, between terms).
	claims func(func(fleet, tenant string))
	// inTerm run beside the controller, for the term (the regional load balancers' configurer
	// and the chaos engine's expiry): one writer of each at a time.
	inTerm []func(context.Context) error
}

// run runs terms until ctx ends.
func (l *leading) run(ctx context.Context) error {
	if l.elector == nil {
		return l.term(ctx, l.deps.store, l.deps.providers)
	}
	follow := l.startFollowing(ctx)
	err := l.elector.Run(ctx, func(tctx context.Context, t *leader.Term) {
		follow.stop()
		l.isLead.Store(true)
		providers := map[string]provider.Provider{}
		for name, p := range l.deps.providers {
			providers[name] = fencedProvider{Provider: p, term: t}
		}
		if err := l.term(tctx, l.etcd.Fenced(t.Key, t.Rev), providers); err != nil && tctx.Err() == nil {
			l.log.Error("controller failed while leading", "err", err)
		}
		l.isLead.Store(false)
		if ctx.Err() == nil {
			follow = l.startFollowing(ctx)
		}
	})
	follow.stop()
	return err
}

// term runs a controller and an autoscaler on st and providers until ctx ends. A store that
// cannot answer or a fence that refuses (the term is ending) makes it start them again after a
// pause, as long as ctx lasts; any other failure ends it.
func (l *leading) term(ctx context.Context, st store.Store, providers map[string]provider.Provider) error {
	for {
		err := l.runControllers(ctx, st, providers)
		if ctx.Err() != nil {
			return nil
		}
		if !errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrFenced) {
			return err
		}
		l.log.Warn("controller stopped: starting it again", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (l *leading) runControllers(ctx context.Context, st store.Store, providers map[string]provider.Provider) error {
	co := l.deps.ctrl
	co.Store, co.Providers = st, providers
	ctrl, err := controller.New(co)
	if err != nil {
		return err
	}
	so := l.deps.scaler
	so.Store, so.Instances = st, ctrl
	scaler, err := autoscaler.NewLoop(so)
	if err != nil {
		return err
	}
	if l.deps.claims != nil {
		l.deps.claims(ctrl.ClaimTenant)
		defer l.deps.claims(nil)
	}
	l.mu.Lock()
	l.ctrl, l.since = ctrl, time.Now()
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		l.pastReconciles += ctrl.Reconciles()
		l.pastErrors += ctrl.ReconcileErrors()
		l.ctrl = nil
		l.mu.Unlock()
	}()
	// The first to fail stops the others.
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ctrl.Start(gctx) })
	g.Go(func() error {
		if err := scaler.Start(gctx); err != nil {
			return fmt.Errorf("autoscaler: %w", err)
		}
		return nil
	})
	for _, run := range l.deps.inTerm {
		g.Go(func() error { return run(gctx) })
	}
	return g.Wait()
}

// follower is a run of lbsync's Follow, stopped before this replica's controller starts.
type follower struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (l *leading) startFollowing(ctx context.Context) *follower {
	fctx, cancel := context.WithCancel(ctx)
	f := &follower{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(f.done)
		_ = l.deps.targets.Follow(fctx, l.deps.store, l.deps.ctrl.Informer)
	}()
	return f
}

func (f *follower) stop() {
	f.cancel()
	<-f.done
}

// fencedProvider asks its provider to create or delete an instance only once the term is
// confirmed, just before. A create that still slips past a term's end is harmless: its record was
// written first, under the fence, so the next leader finds the instance and adopts it by name.
type fencedProvider struct {
	provider.Provider
	term *leader.Term
}

func (p fencedProvider) Create(ctx context.Context, spec provider.InstanceSpec) (provider.Instance, error) {
	if err := p.term.Check(ctx); err != nil {
		return provider.Instance{}, fmt.Errorf("create %s: %w", spec.Name, err)
	}
	return p.Provider.Create(ctx, spec)
}

func (p fencedProvider) Delete(ctx context.Context, name string) error {
	if err := p.term.Check(ctx); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return p.Provider.Delete(ctx, name)
}

// KeepRegions passes the regions to keep on to a provider.RegionKeeper once the term is
// confirmed: removing a region is the leader's decision, as deleting an instance is.
func (p fencedProvider) KeepRegions(ctx context.Context, regions []string) error {
	k, ok := p.Provider.(provider.RegionKeeper)
	if !ok {
		return nil
	}
	if err := p.term.Check(ctx); err != nil {
		return fmt.Errorf("keep regions: %w", err)
	}
	return k.KeepRegions(ctx, regions)
}

// The controller of the term in progress, as the rest of herd up reads it.

// ServingInstances is the controller's, or none on a replica that does not lead.
func (l *leading) ServingInstances() []controller.ServingInstance {
	if c := l.current(); c != nil {
		return c.ServingInstances()
	}
	return nil
}

// Orphans are the controller's, or apiserver.ErrNotLeading on a replica that does not lead.
func (l *leading) Orphans() ([]v1alpha1.Orphan, error) {
	if c := l.current(); c != nil {
		return c.Orphans(), nil
	}
	return nil, apiserver.ErrNotLeading
}

// Reconciles counts the reconciles of every term of this process.
func (l *leading) Reconciles() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.pastReconciles
	if l.ctrl != nil {
		n += l.ctrl.Reconciles()
	}
	return n
}

// ReconcileErrors counts the failed reconciles of every term of this process.
func (l *leading) ReconcileErrors() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.pastErrors
	if l.ctrl != nil {
		n += l.ctrl.ReconcileErrors()
	}
	return n
}

// Synced reports whether this replica's controller runs and has reconciled every fleet once.
func (l *leading) Synced() bool {
	c := l.current()
	return c != nil && c.Synced()
}

func (l *leading) current() *controller.Controller {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctrl
}

// status is what /v1/status says of the controller and, on etcd, of the replicas.
func (l *leading) status(s map[string]string) {
	switch c := l.current(); {
	case c != nil && c.Synced():
		s["controller"] = "synced"
	case c != nil:
		s["controller"] = "syncing"
	default:
		s["controller"] = "standby"
	}
	if l.elector == nil {
		return
	}
	s["replica"] = l.self.Name
	s["role"] = "follower"
	if l.isLead.Load() {
		s["role"] = "leader"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	who, ok, err := leader.Leader(ctx, l.etcd.Client(), electionPrefix(l.etcd))
	switch {
	case err != nil:
		s["leader"] = "unknown: " + err.Error()
	case !ok:
		s["leader"] = "none: no replica has won the election yet"
	default:
		s["leader"] = who.Name + " (" + who.API + ")"
	}
}

// peers are the API URLs of the other replicas campaigning on the same etcd; none without an
// election (one herd up on its own store).
func (l *leading) peers(ctx context.Context) ([]string, error) {
	if l.elector == nil {
		return nil, nil
	}
	rs, err := leader.Replicas(ctx, l.etcd.Client(), electionPrefix(l.etcd))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		if r.API != l.self.API {
			out = append(out, r.API)
		}
	}
	return out, nil
}

// electionPrefix is where the replicas of the store's herd campaign: beside the records' prefix,
// not under it, so that no kind's listing sees them.
func electionPrefix(st *etcd.Store) string {
	p := st.Prefix()
	return p[:len(p)-1] + "-leader/"
}

// campaign makes the control plane on st one replica among those sharing st's etcd: it campaigns
// for the controller under the name host/API address.
func (l *leading) campaign(st *etcd.Store, opts Options, api string) error {
	host, _ := os.Hostname()
	self := leader.Replica{Name: host + "/" + strings.TrimPrefix(api, "http://"), API: api}
	el, err := leader.New(leader.Options{Client: st.Client(), Prefix: electionPrefix(st), TTL: opts.LeaderLeaseTTL, Self: self, Logger: l.log})
	if err != nil {
		return err
	}
	l.elector, l.etcd, l.self = el, st, self
	return nil
}
