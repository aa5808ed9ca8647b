package controller

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
	"herd.dev/herd/internal/store/storetest"
)

// These tests guard the controller's event-driven steady state: a settled fleet is reconciled
// again only when something about it changes (its spec, its load-balancer health, its provider
// instances) or at the slow safety resync, never on a per-fleet timer. They count work rather than
// time it: the controller runs on a fake clock that moves only when the test steps it, and a
// recording work queue shows what each reconcile scheduled.

// recordingQueue is the controller's work queue, recording which fleets workers took and which
// delayed requeues are scheduled and not yet taken.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	mu       sync.Mutex
	taken    map[string]int
	pending  map[string]time.Duration // fleet -> delay of a requeue scheduled since it was last taken
	inflight int
}

func recordQueue(c *Controller) *recordingQueue {
	q := &recordingQueue{TypedRateLimitingInterface: c.queue, taken: map[string]int{}, pending: map[string]time.Duration{}}
	c.queue = q
	return q
}

func (q *recordingQueue) AddAfter(item string, d time.Duration) {
	if d > 0 {
		q.mu.Lock()
		q.pending[item] = d
		q.mu.Unlock()
	}
	q.TypedRateLimitingInterface.AddAfter(item, d)
}

func (q *recordingQueue) Get() (string, bool) {
	item, shutdown := q.TypedRateLimitingInterface.Get()
	if !shutdown {
		q.mu.Lock()
		q.taken[item]++
		q.inflight++
		delete(q.pending, item)
		q.mu.Unlock()
	}
	return item, shutdown
}

// Done is called by a worker after the reconcile and whatever it scheduled.
func (q *recordingQueue) Done(item string) {
	q.TypedRateLimitingInterface.Done(item)
	q.mu.Lock()
	q.inflight--
	q.mu.Unlock()
}

// idle says what keeps the queue from being idle: nothing ready and no reconcile under way.
func (q *recordingQueue) idle() string {
	q.mu.Lock()
	defer q.mu.Unlock()
	if n := q.Len(); n > 0 || q.inflight > 0 {
		return fmt.Sprintf("%d fleets ready and %d being reconciled", n, q.inflight)
	}
	return ""
}

func (q *recordingQueue) snapshot() (taken map[string]int, pending map[string]time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return maps.Clone(q.taken), maps.Clone(q.pending)
}

// notifyingHealth is a fakeHealth that reports changes as the load balancer does.
type notifyingHealth struct {
	*fakeHealth
	mu   sync.Mutex
	subs []func(HealthChange)
}

func (h *notifyingHealth) NotifyHealth(f func(HealthChange)) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.subs = append(h.subs, f)
	return true
}

func (h *notifyingHealth) change(c HealthChange) {
	h.mu.Lock()
	subs := h.subs
	h.mu.Unlock()
	for _, f := range subs {
		f(c)
	}
}

// settledEnv is a controller on a fake clock with three settled fleets of three instances, each
// with a listener, on a counting store and a fake provider whose instances are ready at once.
type settledEnv struct {
	t      *testing.T
	clk    *clocktesting.FakeClock
	store  *storetest.Counting
	fake   *fake.Provider
	health *notifyingHealth
	ctrl   *Controller
	queue  *recordingQueue
}

const settledResync = time.Hour

func newSettledEnv(t *testing.T) *settledEnv {
	e := &settledEnv{t: t, clk: clocktesting.NewFakeClock(time.Now()), store: &storetest.Counting{Store: memory.New()},
		health: &notifyingHealth{fakeHealth: newFakeHealth()}}
	var err error
	if e.fake, err = fake.New(fake.Options{Now: e.clk.Now}); err != nil {
		t.Fatal(err)
	}
	e.ctrl, err = New(Options{Store: e.store, Providers: map[string]provider.Provider{fake.Name: e.fake}, Clock: e.clk,
		Health: e.health, ResyncPeriod: settledResync, PollInterval: time.Second, HealthPollInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.queue = recordQueue(e.ctrl)
	for _, name := range []string{"a", "b", "c"} {
		op, err := store.PutOp(store.Fleets, healFleet(name, 3, 0))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Txn(context.Background(), op); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.ctrl.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("controller stopped with %v", err)
		}
	})
	waitFor(t, 10*time.Second, func() string {
		if !e.ctrl.Synced() {
			return "not synced"
		}
		for _, name := range []string{"a", "b", "c"} {
			f, err := store.GetObject[v1alpha1.Fleet](context.Background(), e.store.Store, store.Fleets, name)
			if err != nil {
				return err.Error()
			}
			if f.Status.Phase != "Ready" || f.Status.ReadyReplicas != 3 {
				return fmt.Sprintf("fleet %s is %s with %d ready", name, f.Status.Phase, f.Status.ReadyReplicas)
			}
		}
		return e.queue.idle()
	})
	// The reconcile that created the instances looks once more after PollInterval, as any that
	// asked the providers for something does; after that look nothing is scheduled.
	e.clk.Step(time.Second)
	waitFor(t, 10*time.Second, func() string {
		if _, pending := e.queue.snapshot(); len(pending) > 0 {
			return fmt.Sprintf("reconciles scheduled: %v", pending)
		}
		return e.queue.idle()
	})
	return e
}

// A settled fleet schedules nothing: no reconcile is pending for any fleet once they are Ready, and
// moving the clock by ten minutes (ten times the health poll of old, short of the safety resync)
// brings no reconcile, no store access and no provider call.
func TestSettledFleetsScheduleNoWork(t *testing.T) {
	e := newSettledEnv(t)
	if _, pending := e.queue.snapshot(); len(pending) > 0 {
		t.Fatalf("settled fleets have reconciles scheduled: %v", pending)
	}
	reconciles, reads, writes, lists := e.ctrl.Reconciles(), e.store.Reads.Load(), e.store.Writes.Load(), e.fake.Calls("List")
	for range 600 {
		e.clk.Step(time.Second)
	}
	// Wait for a reconcile this test asks for, so that anything the clock released runs first.
	e.health.change(HealthChange{Fleet: "a", Instance: "probe"})
	waitFor(t, 10*time.Second, func() string {
		if e.ctrl.Reconciles() == reconciles {
			return "fleet a not reconciled after its health changed"
		}
		return e.queue.idle()
	})
	if got := e.ctrl.Reconciles() - reconciles; got != 1 {
		t.Errorf("%d reconciles over ten minutes and one health change, want 1", got)
	}
	if got := e.fake.Calls("List") - lists; got != 1 {
		t.Errorf("%d provider lists, want the 1 of fleet a's reconcile", got)
	}
	if got := e.store.Reads.Load() - reads; got != 1 {
		t.Errorf("%d store reads, want the 1 of fleet a's reconcile", got)
	}
	if got := e.store.Writes.Load() - writes; got != 0 {
		t.Errorf("%d store writes with nothing changed, want 0", got)
	}
	if _, pending := e.queue.snapshot(); len(pending) > 0 {
		t.Fatalf("reconciles scheduled after an idle window: %v", pending)
	}
}

// A change enqueues its fleet only: a new health state at once, failed requests within the health
// poll interval, a change on the provider's side at once.
func TestChangesEnqueueOnlyTheirFleet(t *testing.T) {
	e := newSettledEnv(t)
	taken0, _ := e.queue.snapshot()
	expect := func(what string, want map[string]int) {
		t.Helper()
		waitFor(t, 10*time.Second, func() string {
			taken, _ := e.queue.snapshot()
			for f, n := range want {
				if taken[f]-taken0[f] < n {
					return fmt.Sprintf("after %s: fleet %s reconciled %d times, want %d", what, f, taken[f]-taken0[f], n)
				}
			}
			return e.queue.idle()
		})
		taken, _ := e.queue.snapshot()
		for _, f := range []string{"a", "b", "c"} {
			if got := taken[f] - taken0[f]; got != want[f] {
				t.Errorf("after %s: fleet %s reconciled %d times, want %d", what, f, got, want[f])
			}
		}
	}

	e.health.change(HealthChange{Fleet: "b", Instance: "b-x"})
	expect("a health change in fleet b", map[string]int{"b": 1})

	e.health.change(HealthChange{Fleet: "c", Instance: "c-x", Errors: true})
	e.health.change(HealthChange{Fleet: "c", Instance: "c-y", Errors: true})
	if _, pending := e.queue.snapshot(); pending["c"] != time.Second || len(pending) != 1 {
		t.Fatalf("failed requests in fleet c scheduled %v, want fleet c after 1s", pending)
	}
	waitFor(t, 5*time.Second, func() string {
		if !e.clk.HasWaiters() {
			return "the queue is not waiting on the clock"
		}
		return ""
	})
	e.clk.Step(time.Second)
	expect("failed requests in fleet c", map[string]int{"b": 1, "c": 1})

	var victim string
	for _, in := range e.ctrl.fleetInstances("a") {
		victim = in.Metadata.Name
	}
	if err := e.fake.Kill(victim, "machine lost"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() string {
		if _, ok := e.ctrl.fleetInstances("a")[victim]; ok {
			return "the killed instance " + victim + " is still recorded"
		}
		return ""
	})
	if e.ctrl.providerChanges.Load() == 0 {
		t.Error("the provider's change was not counted")
	}
	taken, _ := e.queue.snapshot()
	if taken["b"]-taken0["b"] != 1 || taken["c"]-taken0["c"] != 1 {
		t.Errorf("a provider change in fleet a reconciled other fleets: %v (before %v)", taken, taken0)
	}
}

// Without notifications the load balancer's view is polled: the fallback for a HealthSource that
// cannot notify, kept so that such a source still heals.
func TestHealthSourceWithoutNotificationsIsPolled(t *testing.T) {
	for _, tc := range []struct {
		name   string
		health HealthSource
		want   time.Duration
	}{
		{"notifying", &notifyingHealth{fakeHealth: newFakeHealth()}, 0},
		{"polled", newFakeHealth(), 3 * time.Second},
	} {
		c := unstartedController(t, Options{Health: tc.health, HealthPollInterval: 3 * time.Second})
		res := reconcileUntilSettled(t, c)
		if res.RequeueAfter != tc.want {
			t.Errorf("%s: a settled fleet is requeued after %s, want %s", tc.name, res.RequeueAfter, tc.want)
		}
	}
}

// The safety resync reconciles every fleet once per period, spread evenly over it rather than all
// at once.
func TestSafetyResyncSpreadsFleets(t *testing.T) {
	e := newSettledEnv(t)
	taken0, _ := e.queue.snapshot()
	e.clk.Step(settledResync)
	step := settledResync / 4 // three fleets: at 0, 1/4, 2/4 of the period
	waitFor(t, 10*time.Second, func() string {
		taken, pending := e.queue.snapshot()
		if taken["a"]-taken0["a"] != 1 || pending["b"] != step || pending["c"] != 2*step {
			return fmt.Sprintf("after the resync tick: reconciled %v (before %v), scheduled %v; want a now, b after %s, c after %s", taken, taken0, pending, step, 2*step)
		}
		return e.queue.idle()
	})
	e.clk.Step(2 * step)
	waitFor(t, 10*time.Second, func() string {
		taken, pending := e.queue.snapshot()
		if taken["b"]-taken0["b"] != 1 || taken["c"]-taken0["c"] != 1 || len(pending) > 0 {
			return fmt.Sprintf("half a period after the tick: reconciled %v (before %v), scheduled %v", taken, taken0, pending)
		}
		return e.queue.idle()
	})
}

// refusingSink is a TargetSink whose load balancer refuses the fleet's listeners while refused is
// set, as when another program holds the port.
type refusingSink struct {
	drainSink
	refused atomic.Bool
}

func (r *refusingSink) ListenerError(string) error {
	if r.refused.Load() {
		return fmt.Errorf("listen tcp 127.0.0.1:8080: bind: address already in use")
	}
	return nil
}

// Nothing notifies when a port taken on the host frees, so a fleet whose listeners were refused is
// looked at again every PollInterval until they are served; then it settles.
func TestRefusedListenerIsRetried(t *testing.T) {
	sink := &refusingSink{drainSink: drainSink{released: map[string]bool{}}}
	sink.refused.Store(true)
	c := unstartedController(t, Options{Targets: sink, Health: &notifyingHealth{fakeHealth: newFakeHealth()}, PollInterval: 2 * time.Second})
	if res := reconcileUntilSettled(t, c); res.RequeueAfter != 2*time.Second {
		t.Errorf("a fleet whose listeners are refused is requeued after %s, want the poll interval 2s", res.RequeueAfter)
	}
	sink.refused.Store(false)
	if res := reconcileUntilSettled(t, c); res.RequeueAfter != 0 {
		t.Errorf("once its listeners are served the fleet is requeued after %s, want never", res.RequeueAfter)
	}
}

// unstartedController is a controller, not started, on a memory store holding fleet a (two
// instances, a listener) and a fake provider whose instances are ready at once; opts gives the
// rest. Tests drive it by calling Reconcile.
func unstartedController(t *testing.T, opts Options) *Controller {
	t.Helper()
	p, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	opts.Store = memory.New()
	opts.Providers = map[string]provider.Provider{fake.Name: p}
	op, err := store.PutOp(store.Fleets, healFleet("a", 2, 0))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := opts.Store.Txn(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	c, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	return c
}

// reconcileUntilSettled reconciles fleet a three times (create, then refresh until nothing
// changes) and returns the last result.
func reconcileUntilSettled(t *testing.T, c *Controller) Result {
	t.Helper()
	var res Result
	for range 3 {
		var err error
		if res, err = c.Reconcile(context.Background(), "a"); err != nil {
			t.Fatal(err)
		}
	}
	return res
}
