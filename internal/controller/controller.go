// Package controller is the fleet reconciler: it turns Fleets into instances. It is level-based:
// every reconcile of a fleet compares what the store says should exist with what the providers say
// does exist, and moves one step towards the former; nothing depends on having seen a particular
// change. It runs as one runnable (Start): client-go's rate-limited work queue of fleet names
// (QueueName), a few workers, the fleets' changes from the shared informer and a periodic resync,
// all on an injected clock.
//
// A reconcile observes (the fleet from the store, its records from the controller's index, its
// instances from the providers), plans without I/O (plan.go runs the phases: adopt and refresh in
// records.go, heal in healphase.go judging with healjudge.go, roll out in rollout.go and wave.go,
// scale in scale.go, the status in status.go) and executes the plan (execute.go). Events
// describing the plan go to an EventRecorder (internal/events) only once what they describe is
// stored.
//
// The controller is the only writer of Instance records. It keeps them in memory, loaded at start
// and updated on every write, and records an instance before asking a provider to create it (with a
// name chosen in advance), so a crash at any point leaves either a record to finish or a labelled
// provider instance to adopt: never a duplicate. What a provider runs that no fleet owns (left by
// a harness killed at the wrong moment, or a store restored from an older copy) is deleted by the
// orphan collector (orphans.go). Other loops read the records through
// a read-only view (view.go); the autoscaler, which writes spec.replicas.desired, lives in
// internal/autoscaler.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/events"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
)

// QueueName names the controller's work queue of fleet names, for workqueue metrics.
const QueueName = "fleets"

// Options configure a Controller.
type Options struct {
	Store store.Store
	// Informer, when set, is the shared cache of fleets the controller follows (it must be on
	// Store, and run by its owner); when nil, Start runs one of its own on Store.
	Informer *informer.Informer
	// Providers by name; a region's provider must be one of them.
	Providers map[string]provider.Provider
	Logger    *slog.Logger
	// Workers is how many fleets are reconciled at once. Default: 4.
	Workers int
	// ResyncPeriod is how often every fleet is reconciled even when nothing changed: a safety net
	// for changes nobody reported (an instance that died on a provider that does not notify, a
	// fleet without listeners). Each resync spreads the fleets evenly over the period, so the
	// work is a trickle, not a burst. Default: 5m.
	ResyncPeriod time.Duration
	// PollInterval is how soon a fleet with booting or terminating instances is looked at again.
	// Default: 1s.
	PollInterval time.Duration
	// RetryBase and RetryMax bound the exponential backoff after errors. Defaults: 200ms and 30s.
	RetryBase, RetryMax time.Duration
	// MaxConcurrentCreates bounds how many instances one reconcile asks a provider for. Default: 100.
	MaxConcurrentCreates int
	// Targets, when set, receives every fleet's ready instances (the load balancer).
	Targets TargetSink
	// Health, when set, reports the load balancer's view of each instance, and instances that stay
	// unhealthy past their health check's thresholds, or whose 5xx rate stands out from their
	// peers, are replaced (self-healing; see healjudge.go).
	Health HealthSource
	// Serving, when set, reports each instance's state in the load balancer that sends it traffic
	// (a region's own, for a fleet served by its regions' load balancers), which is what an
	// instance must be healthy in to count as serving: in the fleet's ready counts, its Ready
	// condition and its rollouts. Default: Health.
	Serving ServingSource
	// HealthPollInterval is how often a fleet with listeners is looked at for unhealthy instances
	// when Health is set and cannot notify (HealthNotifier), and how soon a fleet whose instances
	// fail requests is judged for outliers when it can. Default: 1s.
	HealthPollInterval time.Duration
	// HealBackoffBase and HealBackoffMax bound the pause in healing after replacements that fail
	// themselves (e.g. a broken image): base, doubling with each failure in a row, up to max.
	// Defaults: 10s and 5m.
	HealBackoffBase, HealBackoffMax time.Duration
	// Reachability, when set, says which regions users cannot reach (a partition): such a region
	// is reported Unreachable in status.regions and its instances are not replaced for failing the
	// load balancer's checks. Call RegionChanged when its answer for a region changes.
	Reachability RegionReachability
	// Stats, when set, gives per-revision figures for canary analysis; without it canary steps
	// advance on their pauses alone.
	Stats StatsSource
	// ResolveImage, when set, turns a fleet's image reference (a node image name) into the bundle
	// digest instances boot from. The API pins a fleet's image when it is applied (Fleet.Pinned);
	// the controller resolves only a fleet stored before that, once, and stores the pin. A reference
	// it does not know is returned unchanged.
	ResolveImage func(ref string) (string, error)
	// Events receives the events the controller records. Default: a recorder of its own
	// (internal/events) writing to Store, run by Start.
	Events EventRecorder
	// Clock is the controller's time: every timestamp it writes, its resync ticker and its work
	// queue's delays. Default: the real clock.
	Clock clock.WithTicker
	// ProviderCalls, when set, is told of every provider call: the provider, the operation
	// (create, delete or list), how long it took and its error. herd up counts them in /metrics.
	ProviderCalls func(provider, op string, took time.Duration, err error)
	// OrphanGrace is how long an orphan (an instance no fleet owns: orphans.go) is left before the
	// controller deletes it. Default: 1m.
	OrphanGrace time.Duration
	// KeepOrphans, when true, makes the controller only report orphans, never delete them.
	KeepOrphans bool
	// Orphans, when set, is told what the orphan collector finds and deletes.
	Orphans OrphanObserver
	// QueueMetrics, when set, receives the work queue's metrics (depth, adds, latency, retries)
	// under the name QueueName; client_golang adapters exist for it. Default: none.
	QueueMetrics workqueue.MetricsProvider
	// TenantActivity, when set, says when each tenant of a fleet with tenancy last had a request,
	// which scales an idle tenant to zero after spec.tenancy.idleAfter. Without it, a tenant is
	// active from its claim for idleAfter.
	TenantActivity TenantActivity
}

// TargetSink is told which instances of a fleet should receive traffic: the load balancer.
type TargetSink interface {
	// SetFleetTargets gives the fleet's instances; those not Terminating are routed, the others
	// are drained. weights, when not nil, is each revision's percent of the traffic (a rollout's
	// decision, applied in one update); nil shares traffic in proportion to each revision's
	// instances. A revision missing from a non-nil map gets none.
	SetFleetTargets(fleet *v1alpha1.Fleet, instances []*v1alpha1.Instance, weights map[string]int32)
	// RemoveFleet forgets a deleted fleet.
	RemoveFleet(name string)
	// Drained reports whether an instance no longer has requests in flight, so it can be deleted.
	Drained(instance string) bool
	// ListenerError reports why the load balancer refused the fleet's listeners (a port in use on
	// the host, a permission), or nil while it serves them: the LoadBalancerReady condition.
	ListenerError(fleet string) error
}

// Result tells the worker when to look at a fleet again.
type Result struct {
	// RequeueAfter, when > 0, reconciles the fleet again after this long.
	RequeueAfter time.Duration
}

// Controller reconciles fleets. Create it with New and run it with Start.
type Controller struct {
	opts  Options
	log   *slog.Logger
	clock clock.WithTicker
	// queue holds fleet names. Its rate limiter gives the backoff after errors; the queue itself
	// guarantees that a name waiting more than once is reconciled once and never by two workers
	// at the same time, and that a name added during its reconcile is reconciled again after.
	queue   workqueue.TypedRateLimitingInterface[string]
	limiter workqueue.TypedRateLimiter[string]
	events  EventRecorder
	// ownEvents is the recorder the controller runs itself when Options.Events is nil.
	ownEvents *events.Recorder

	// inf is the cache of fleets the controller follows, set by Start.
	inf *informer.Informer

	mu        sync.Mutex
	instances map[string]map[string]*v1alpha1.Instance // fleet -> name -> instance

	orphans orphans

	// statusWrites maps a fleet to the resource version of the controller's own last status write,
	// so that the watch event it causes does not trigger a reconcile (which would defeat backoff).
	statusWrites sync.Map

	healing sync.Map // fleet -> *healState

	// fleetRegions maps a fleet to the regions of its spec as its last reconcile saw them, for
	// RegionChanged.
	fleetRegions sync.Map // fleet -> []string
	// fleetKept and lastKept are the regions each fleet names and those each provider was last
	// told to keep (keepregions.go).
	fleetKept sync.Map // fleet -> map[provider][]region
	keptMu    sync.Mutex
	lastKept  map[string]string // provider -> its regions, joined

	// healthNotified is true when Options.Health reports changes (HealthNotifier), so that no
	// fleet is polled for health; providerChanges counts the providers' notifications.
	healthNotified  bool
	providerChanges atomic.Int64

	synced     atomic.Bool
	reconciles atomic.Int64
	failures   atomic.Int64 // reconciles that returned an error
	lastErrors sync.Map     // fleet -> string, for health reporting

	// started is when the controller was made: the tenants' activity counts from it at least.
	started      time.Time
	tenantClaims tenantClaims
}

// New checks the options and returns a controller that is not yet running.
func New(opts Options) (*Controller, error) {
	if opts.Store == nil {
		return nil, errors.New("controller: a store is required")
	}
	if len(opts.Providers) == 0 {
		return nil, errors.New("controller: at least one provider is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	orDefault(&opts.Workers, 4)
	orDefault(&opts.ResyncPeriod, 5*time.Minute)
	orDefault(&opts.PollInterval, time.Second)
	orDefault(&opts.RetryBase, 200*time.Millisecond)
	orDefault(&opts.RetryMax, 30*time.Second)
	orDefault(&opts.HealthPollInterval, time.Second)
	orDefault(&opts.HealBackoffBase, 10*time.Second)
	orDefault(&opts.HealBackoffMax, 5*time.Minute)
	orDefault(&opts.MaxConcurrentCreates, 100)
	orDefault(&opts.OrphanGrace, time.Minute)
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	log := opts.Logger.With("component", "controller")
	var own *events.Recorder
	if opts.Events == nil {
		own = events.New(events.Options{Store: opts.Store, Logger: opts.Logger, Clock: opts.Clock})
		opts.Events = own
	}
	limiter := workqueue.NewTypedItemExponentialFailureRateLimiter[string](opts.RetryBase, opts.RetryMax)
	c := &Controller{
		opts:    opts,
		log:     log,
		clock:   opts.Clock,
		limiter: limiter,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[string]{
			Name: QueueName, Clock: opts.Clock, MetricsProvider: opts.QueueMetrics,
		}),
		events:    opts.Events,
		ownEvents: own,
		instances: map[string]map[string]*v1alpha1.Instance{},
		started:   opts.Clock.Now(),
		orphans:   orphans{found: map[orphanKey]*v1alpha1.Orphan{}, kick: make(chan struct{}, 1)},
	}
	// Changes are what bring a settled fleet back: the load balancer's (health) and the
	// providers' (an instance failed or vanished on their side).
	if n, ok := opts.Health.(HealthNotifier); ok {
		c.healthNotified = n.NotifyHealth(c.healthChanged)
	}
	for _, p := range opts.Providers {
		if n, ok := p.(provider.Notifier); ok {
			n.Notify(c.providerChanged)
		}
	}
	return c, nil
}

// providerChanged enqueues the fleet of an instance that changed on its provider's side.
func (c *Controller) providerChanged(fleet string) {
	if fleet == "" {
		return
	}
	c.providerChanges.Add(1)
	c.queue.Add(fleet)
}

// orDefault sets an option left at zero (or below) to its default.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Synced reports whether the controller has loaded its state and reconciled every fleet once.
func (c *Controller) Synced() bool { return c.synced.Load() }

// Reconciles counts reconciles done, for benchmarks and tests.
func (c *Controller) Reconciles() int64 { return c.reconciles.Load() }

// ReconcileErrors counts reconciles that failed (and were retried), for metrics.
func (c *Controller) ReconcileErrors() int64 { return c.failures.Load() }

// Start loads state, then reconciles until ctx ends. It returns nil on a clean stop.
func (c *Controller) Start(ctx context.Context) error {
	inf := c.opts.Informer
	if inf == nil {
		inf = informer.New(informer.Options{Store: c.opts.Store, Logger: c.log})
		ictx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = inf.Start(ictx)
		}()
		defer func() {
			stop()
			<-done
		}()
	}
	if err := inf.WaitForSync(ctx); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	// Every change of a fleet from now on enqueues it, except the controller's own status writes;
	// the handler is first told of every fleet there is, which enqueues them all.
	defer inf.AddHandler(informer.Handler{Fleet: c.fleetChanged})()
	fleets := inf.Fleets()
	// The instance records are the controller's own index, written through on every write: they
	// are listed from the store itself, as they are at this revision and no later.
	insts, _, err := store.ListObjects[v1alpha1.Instance](ctx, c.opts.Store, store.Instances)
	if err != nil {
		return fmt.Errorf("controller: list instances: %w", err)
	}
	if c.ownEvents != nil {
		// Deferred first, so run last: after the workers stopped, their last events are written.
		defer c.startEvents(ctx)()
	}
	c.mu.Lock()
	for _, in := range insts {
		c.cacheLocked(in)
	}
	c.mu.Unlock()

	// Every fleet that exists or has records is looked at: the records of a fleet deleted while
	// the controller was down are how its instances are found and deleted. What a provider runs
	// without a record is the orphan collector's (orphans.go).
	keys := map[string]bool{}
	for _, f := range fleets {
		keys[f.Metadata.Name] = true
	}
	for _, in := range insts {
		keys[in.Spec.Fleet] = true
	}
	for k := range keys {
		c.queue.Add(k)
	}
	c.inf = inf
	var collector sync.WaitGroup
	defer collector.Wait()
	cctx, stopCollector := context.WithCancel(ctx)
	defer stopCollector()
	collector.Go(func() { c.collectOrphans(cctx) })

	c.log.Info("controller started", "fleets", len(fleets), "instances", len(insts), "workers", c.opts.Workers)

	var wg sync.WaitGroup
	pending := atomic.Int64{}
	pending.Store(int64(len(keys)))
	firstPass := sync.Map{}
	for k := range keys {
		firstPass.Store(k, true)
	}
	if len(keys) == 0 {
		c.synced.Store(true)
	}
	for range c.opts.Workers {
		wg.Go(func() {
			for {
				key, shutdown := c.queue.Get()
				if shutdown {
					return
				}
				if ctx.Err() != nil {
					// Stopping: what is still queued is not worth a reconcile that would fail.
					c.queue.Done(key)
					continue
				}
				c.process(ctx, key)
				c.queue.Done(key)
				if _, first := firstPass.LoadAndDelete(key); first && pending.Add(-1) == 0 {
					c.synced.Store(true)
					c.log.Info("controller synced")
				}
				if c.synced.Load() {
					c.keepRegions(ctx)
				}
			}
		})
	}

	resync := c.clock.NewTicker(c.opts.ResyncPeriod)
	defer resync.Stop()
	defer func() {
		c.queue.ShutDown()
		wg.Wait()
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-resync.C():
			c.enqueueAll(inf)
			c.kickOrphans()
		}
	}
}

// startEvents runs the controller's own event recorder until the returned stop is called. Its
// context outlives ctx so that the events of the last reconciles are still written.
func (c *Controller) startEvents(ctx context.Context) (stop func()) {
	evCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.ownEvents.Start(evCtx); err != nil {
			c.log.Error("event recorder stopped: events are logged but not stored", "err", err)
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// fleetChanged enqueues a fleet the informer reports changed, unless the change is the
// controller's own status write, or a resync (the controller has its own, spread out).
func (c *Controller) fleetChanged(old, new *v1alpha1.Fleet) {
	if old == new {
		return
	}
	if new == nil {
		c.queue.Add(old.Metadata.Name)
		return
	}
	if rv, ok := c.statusWrites.Load(new.Metadata.Name); ok && rv.(int64) == new.Metadata.ResourceVersion {
		return
	}
	c.queue.Add(new.Metadata.Name)
}

// enqueueAll is the safety resync: every fleet that exists or has records is reconciled once more,
// spread evenly over the resync period so that the work trickles rather than bursts.
func (c *Controller) enqueueAll(inf *informer.Informer) {
	keys := map[string]bool{}
	for _, f := range inf.Fleets() {
		keys[f.Metadata.Name] = true
	}
	c.mu.Lock()
	for f := range c.instances {
		keys[f] = true
	}
	c.mu.Unlock()
	names := sortedKeys(keys)
	step := c.opts.ResyncPeriod / time.Duration(len(names)+1)
	for i, name := range names {
		c.queue.AddAfter(name, time.Duration(i)*step)
	}
}

func (c *Controller) process(ctx context.Context, key string) {
	res, err := c.Reconcile(ctx, key)
	c.reconciles.Add(1)
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		c.failures.Add(1)
		// As AddRateLimited, with the delay kept for the log.
		d := c.limiter.When(key)
		c.queue.AddAfter(key, d)
		c.log.Warn("reconcile failed, retrying", "fleet", key, "retry_in", d.String(), "err", err)
		c.lastErrors.Store(key, err.Error())
		return
	}
	c.queue.Forget(key)
	c.lastErrors.Delete(key)
	if res.RequeueAfter > 0 {
		c.queue.AddAfter(key, res.RequeueAfter)
	}
}

// cacheLocked stores in in the instance index. c.mu must be held.
func (c *Controller) cacheLocked(in *v1alpha1.Instance) {
	m := c.instances[in.Spec.Fleet]
	if m == nil {
		m = map[string]*v1alpha1.Instance{}
		c.instances[in.Spec.Fleet] = m
	}
	m[in.Metadata.Name] = in
}

// fleetInstances returns copies of a fleet's instance records, safe to modify.
func (c *Controller) fleetInstances(fleet string) map[string]*v1alpha1.Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]*v1alpha1.Instance, len(c.instances[fleet]))
	for name, in := range c.instances[fleet] {
		cp := *in
		out[name] = &cp
	}
	return out
}

// observeCall reports one provider call, begun at start, to Options.ProviderCalls.
func (c *Controller) observeCall(provider, op string, start time.Time, err error) {
	if c.opts.ProviderCalls != nil {
		c.opts.ProviderCalls(provider, op, time.Since(start), err)
	}
}
