package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// env is a controller on a memory store and a fake provider, running until the test ends.
type env struct {
	t     *testing.T
	store store.Store
	fake  *fake.Provider
	ctrl  *Controller
	stop  func()
	// resolve, when set, is the controller's image resolver.
	resolve func(string) (string, error)
	// targets, when set, is the controller's target sink.
	targets TargetSink
	// health and healBackoff, when set, are the controller's health source and healing backoff base.
	health      HealthSource
	healBackoff time.Duration
	// serving, when set, is the controller's source of the load balancer that sends traffic.
	serving ServingSource
	// stats, when set, is the controller's source of per-revision figures for canary analysis.
	stats StatsSource
	// recorder, when set, receives the controller's events in place of the store.
	recorder EventRecorder
	// reach, when set, says which regions are unreachable.
	reach RegionReachability
	// keeper, when set, makes the provider a provider.RegionKeeper that tells it the regions.
	keeper *regionKeeper
}

// newEnv starts a controller on st and p; nil stands for a memory store and a fake provider whose
// instances boot in 50ms.
func newEnv(t *testing.T, st store.Store, p *fake.Provider) *env {
	t.Helper()
	return startEnv(t, &env{store: st, fake: p})
}

// startEnv fills in the store and provider e leaves unset as newEnv does, starts e's controller and
// stops it when the test ends.
func startEnv(t *testing.T, e *env) *env {
	t.Helper()
	e.t = t
	if e.store == nil {
		e.store = memory.New()
	}
	if e.fake == nil {
		p, err := fake.New(fake.Options{BootDelay: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		e.fake = p
	}
	e.start()
	t.Cleanup(func() { e.stop() })
	return e
}

func (e *env) start() {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var prov provider.Provider = e.fake
	if e.keeper != nil {
		e.keeper.Provider = e.fake
		prov = e.keeper
	}
	ctrl, err := New(Options{
		Store: e.store, Providers: map[string]provider.Provider{fake.Name: prov}, Logger: log,
		PollInterval: 20 * time.Millisecond, ResyncPeriod: time.Hour, // no test may lean on the safety resync
		RetryBase: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond,
		ResolveImage: e.resolve, Targets: e.targets, Stats: e.stats,
		Health: e.health, Serving: e.serving, HealthPollInterval: 20 * time.Millisecond,
		HealBackoffBase: e.healBackoff, HealBackoffMax: 8 * e.healBackoff, Events: e.recorder,
		Reachability: e.reach, OrphanGrace: 20 * time.Millisecond,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Start(ctx) }()
	e.ctrl = ctrl
	e.stop = func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("controller stopped with %v", err)
		}
		e.stop = func() {}
	}
}

func fleetSpec(name, image string, desired int32) *v1alpha1.Fleet {
	f := &v1alpha1.Fleet{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: name, Generation: 1},
		Spec: v1alpha1.FleetSpec{
			Image:    image,
			Replicas: v1alpha1.Replicas{Min: new(int32(0)), Max: new(int32(100)), Desired: &desired},
		},
	}
	v1alpha1.SetFleetDefaults(f, fake.Name)
	return f
}

// put writes f as a user's apply would, over whatever the store holds. The controller writes the
// fleet's status meanwhile, so a conflict is retried on the fresh version, as the API does.
func (e *env) put(f *v1alpha1.Fleet) {
	e.t.Helper()
	ctx := context.Background()
	if _, err := store.GetObject[v1alpha1.Fleet](ctx, e.store, store.Fleets, f.Metadata.Name); err != nil {
		f.Metadata.ResourceVersion = 0
		op, err := store.PutOp(store.Fleets, f)
		if err != nil {
			e.t.Fatal(err)
		}
		if _, err := e.store.Txn(ctx, op); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	stored, err := store.UpdateObject(ctx, e.store, store.Fleets, f.Metadata.Name, func(cur *v1alpha1.Fleet) (bool, error) {
		next := *f
		next.Metadata.ResourceVersion = cur.Metadata.ResourceVersion
		next.Metadata.Generation = cur.Metadata.Generation + 1
		*cur = next
		return true, nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
	f.Metadata.ResourceVersion = stored.Metadata.ResourceVersion
	f.Metadata.Generation = stored.Metadata.Generation
}

func (e *env) fleet(name string) *v1alpha1.Fleet {
	e.t.Helper()
	f, err := store.GetObject[v1alpha1.Fleet](context.Background(), e.store, store.Fleets, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return f
}

func (e *env) records(fleet string) []*v1alpha1.Instance {
	all, _, err := store.ListObjects[v1alpha1.Instance](context.Background(), e.store, store.Instances)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*v1alpha1.Instance
	for _, in := range all {
		if in.Spec.Fleet == fleet {
			out = append(out, in)
		}
	}
	return out
}

func (e *env) observed(fleet string) []provider.Instance {
	list, err := e.fake.List(context.Background(), provider.ListOptions{Fleet: fleet})
	if err != nil {
		e.t.Fatal(err)
	}
	return list
}

// waitFor polls cond until it returns "" (satisfied) or the deadline passes; cond's last answer
// says what was still wrong.
func waitFor(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("condition not met after %s: %s", timeout, last)
}

// converged says what keeps fleet from having exactly n Ready instances of revision rev, with
// records and provider instances matching one to one.
func (e *env) converged(fleet string, n int, rev string) func() string {
	return func() string {
		recs, obs := e.records(fleet), e.observed(fleet)
		if len(recs) != n || len(obs) != n {
			return fmt.Sprintf("%d records, %d provider instances, want %d", len(recs), len(obs), n)
		}
		names := map[string]bool{}
		for _, o := range obs {
			names[o.Name] = true
		}
		for _, r := range recs {
			if !names[r.Metadata.Name] {
				return "record without provider instance: " + r.Metadata.Name
			}
			if r.Status.Phase != v1alpha1.PhaseReady {
				return fmt.Sprintf("%s is %s", r.Metadata.Name, r.Status.Phase)
			}
			if rev != "" && r.Spec.Revision != rev {
				return fmt.Sprintf("%s has revision %s, want %s", r.Metadata.Name, r.Spec.Revision, rev)
			}
		}
		f, err := store.GetObject[v1alpha1.Fleet](context.Background(), e.store, store.Fleets, fleet)
		if err != nil {
			return err.Error()
		}
		if f.Status.ReadyReplicas != int32(n) || f.Status.Phase != "Ready" || f.Status.ObservedGeneration != f.Metadata.Generation {
			return fmt.Sprintf("fleet status %+v", f.Status)
		}
		return ""
	}
}

func TestScaleUpAndDown(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := fleetSpec("web", "img-1", 3)
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 3, RevisionName(f)))

	f.Spec.Replicas.Desired = new(int32(7))
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 7, RevisionName(f)))

	f.Spec.Replicas.Desired = new(int32(2))
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 2, RevisionName(f)))

	f.Spec.Replicas.Desired = new(int32(0))
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		if n := len(e.observed("web")) + len(e.records("web")); n != 0 {
			return fmt.Sprintf("%d left", n)
		}
		return ""
	})
}

func TestDeleteFleetDeletesInstances(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.put(fleetSpec("a", "img", 3))
	e.put(fleetSpec("b", "img", 2))
	waitFor(t, 5*time.Second, e.converged("a", 3, ""))
	waitFor(t, 5*time.Second, e.converged("b", 2, ""))
	if err := store.Delete(context.Background(), e.store, store.Fleets, "a", 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, func() string {
		if n, m := len(e.observed("a")), len(e.records("a")); n+m != 0 {
			return fmt.Sprintf("%d provider instances and %d records of a left", n, m)
		}
		return ""
	})
	if n := len(e.observed("b")); n != 2 {
		t.Fatalf("fleet b has %d instances after deleting a, want 2", n)
	}
}

func TestProviderErrorsAreRetriedWithBackoff(t *testing.T) {
	e := newEnv(t, nil, nil)
	boom := errors.New("capacity exhausted")
	e.fake.FailNext("Create", boom, boom, boom, boom, boom, boom) // three rounds of two
	f := fleetSpec("web", "img", 2)
	start := time.Now()
	e.put(f)
	waitFor(t, 10*time.Second, e.converged("web", 2, ""))
	if calls := e.fake.Calls("Create"); calls < 8 {
		t.Fatalf("Create called %d times, want at least 8 (6 failures then 2 successes)", calls)
	}
	// Backoff from 10ms doubling: three failed rounds wait at least 10+20+40ms in all.
	if elapsed := time.Since(start); elapsed < 70*time.Millisecond {
		t.Fatalf("converged after %s: failures were not backed off", elapsed)
	}
	waitFor(t, 5*time.Second, e.eventsAtLeast("CreateFailed", 1))
	if ev := e.events("CreateFailed")[0]; ev.Type != v1alpha1.EventWarning {
		t.Fatalf("CreateFailed event of type %s, want %s", ev.Type, v1alpha1.EventWarning)
	}
}

func TestFailedInstanceIsReplaced(t *testing.T) {
	e := newEnv(t, nil, nil)
	e.put(fleetSpec("web", "img", 3))
	waitFor(t, 5*time.Second, e.converged("web", 3, ""))
	victim := e.observed("web")[0].Name
	if err := e.fake.Kill(victim, "kernel panic"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, e.replaced("web", victim, 3))
}

func TestRollingUpdateKeepsCapacity(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := fleetSpec("web", "img-1", 4)
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 4, RevisionName(f)))
	f.Spec.Image = "img-2"
	e.put(f)
	newRev := RevisionName(f)
	deadline := time.Now().Add(10 * time.Second)
	for {
		readyCount, total := 0, 0
		for _, o := range e.observed("web") {
			total++
			if o.State == provider.StateReady {
				readyCount++
			}
		}
		// maxUnavailable 0, maxSurge 1: never fewer than 4 ready, never more than 5 instances.
		if readyCount < 4 || total > 5 {
			t.Fatalf("during rollout: %d ready of %d instances", readyCount, total)
		}
		if e.converged("web", 4, newRev)() == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rollout did not finish: %s", e.converged("web", 4, newRev)())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A restarted controller adopts provider instances it has no record of, deletes those beyond the
// desired count and, as orphans, those of fleets that no longer exist, and creates recorded instances that the
// provider never made: the states a crash can leave.
func TestRestartAdoptsAndCleansUp(t *testing.T) {
	st := memory.New()
	p, _ := fake.New(fake.Options{})
	ctx := context.Background()
	f := fleetSpec("web", "img", 3)
	rev := RevisionName(f)
	labels := func(fleet string) map[string]string {
		return map[string]string{v1alpha1.LabelFleet: fleet, v1alpha1.LabelRevision: rev, v1alpha1.LabelRegion: "local"}
	}
	// Two unrecorded instances of web, one of a deleted fleet.
	for _, n := range []string{"web-aaaaa", "web-bbbbb"} {
		if _, err := p.Create(ctx, provider.InstanceSpec{Name: n, Image: "img", Labels: labels("web")}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Create(ctx, provider.InstanceSpec{Name: "gone-ccccc", Image: "img", Labels: labels("gone")}); err != nil {
		t.Fatal(err)
	}
	// Two recorded Pending instances the provider never created.
	for _, n := range []string{"web-ddddd", "web-eeeee"} {
		in := &v1alpha1.Instance{
			TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindInstance},
			Metadata: v1alpha1.ObjectMeta{Name: n, Labels: labels("web")},
			Spec:     v1alpha1.InstanceSpec{Fleet: "web", Revision: rev, Region: "local", Provider: fake.Name, Image: "img"},
			Status:   v1alpha1.InstanceStatus{Phase: v1alpha1.PhasePending},
		}
		op, _ := store.PutOp(store.Instances, in)
		if _, err := st.Txn(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	// The fleet exists before the controller starts, as after a crash.
	fop, _ := store.PutOp(store.Fleets, f)
	if _, err := st.Txn(ctx, fop); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, st, p)
	waitFor(t, 5*time.Second, e.converged("web", 3, rev))
	waitFor(t, 5*time.Second, func() string {
		if n := len(e.observed("gone")); n != 0 {
			return fmt.Sprintf("%d instances of the deleted fleet remain", n)
		}
		return ""
	})
	// Adopted instances are kept in preference to creating new ones: nothing but the four known
	// names may exist.
	var names []string
	for _, o := range e.observed("web") {
		names = append(names, o.Name)
	}
	sort.Strings(names)
	known := map[string]bool{"web-aaaaa": true, "web-bbbbb": true, "web-ddddd": true, "web-eeeee": true}
	for _, n := range names {
		if !known[n] {
			t.Fatalf("controller created %s although four instances already existed or were recorded: %v", n, names)
		}
	}
}

// A fleet stored before images were pinned at apply is pinned once, with an event, to the digest
// its name resolves to; rebuilding the image (the name now resolving to another digest) then rolls
// nothing, even when the fleet is reconciled again, until a new pin (an apply or a rollout restart)
// names the new digest. The stored spec keeps the name the user wrote.
func TestImagePinnedNotFollowingRebuilds(t *testing.T) {
	var digest atomic.Value
	digest.Store("sha256:one")
	st := memory.New()
	p, _ := fake.New(fake.Options{})
	e := startEnv(t, &env{store: st, fake: p, resolve: func(ref string) (string, error) {
		if ref == "hello" {
			return digest.Load().(string), nil
		}
		return ref, nil
	}})
	e.put(fleetSpec("web", "hello", 2))
	one := fleetSpec("web", "sha256:one", 2)
	waitFor(t, 5*time.Second, e.converged("web", 2, RevisionName(one)))
	waitFor(t, 5*time.Second, e.eventsAtLeast("ImagePinned", 1))
	got, _ := store.GetObject[v1alpha1.Fleet](context.Background(), st, store.Fleets, "web")
	if got.Spec.Image != "hello" || got.Pinned == nil || got.Pinned.Digest != "sha256:one" || got.Pinned.By != v1alpha1.PinnedByUpgrade {
		t.Fatalf("stored fleet: spec.image %q, pinned %+v; want the name kept and sha256:one pinned by upgrade", got.Spec.Image, got.Pinned)
	}

	// A rebuild, then a change the controller must act on: a third instance, of the pinned image.
	digest.Store("sha256:two")
	scaled := fleetSpec("web", "hello", 3)
	scaled.Pinned = got.Pinned
	e.put(scaled)
	waitFor(t, 5*time.Second, e.converged("web", 3, RevisionName(one)))
	for _, in := range e.records("web") {
		if in.Spec.Image != "sha256:one" {
			t.Fatalf("instance %s boots %q after a rebuild of the name, want the pinned sha256:one", in.Metadata.Name, in.Spec.Image)
		}
	}

	// An apply pins the new digest: the fleet rolls to it.
	repinned := fleetSpec("web", "hello", 3)
	repinned.Pinned = &v1alpha1.PinnedImage{Ref: "hello", Digest: "sha256:two", By: v1alpha1.PinnedByApply}
	e.put(repinned)
	waitFor(t, 5*time.Second, e.converged("web", 3, RevisionName(fleetSpec("web", "sha256:two", 3))))
	if n := len(e.events("ImagePinned")); n != 1 {
		t.Fatalf("%d ImagePinned events, want 1: a fleet is upgraded once", n)
	}
}

// drainSink is a TargetSink whose instances stay undrained until released.
type drainSink struct {
	mu       sync.Mutex
	routed   map[string]bool
	released map[string]bool
}

func (d *drainSink) SetFleetTargets(f *v1alpha1.Fleet, ins []*v1alpha1.Instance, _ map[string]int32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.routed = map[string]bool{}
	for _, in := range ins {
		if in.Status.Phase != v1alpha1.PhaseTerminating {
			d.routed[in.Metadata.Name] = true
		}
	}
}
func (d *drainSink) RemoveFleet(string)         {}
func (d *drainSink) ListenerError(string) error { return nil }
func (d *drainSink) Drained(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.released[name]
}

// Scaling down takes an instance out of the load balancer first and deletes it only once drained.
func TestScaleDownWaitsForDrain(t *testing.T) {
	sink := &drainSink{released: map[string]bool{}}
	p, _ := fake.New(fake.Options{})
	e := startEnv(t, &env{fake: p, targets: sink})
	f := fleetSpec("web", "img", 2)
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 2, ""))
	f.Spec.Replicas.Desired = new(int32(1))
	e.put(f)
	var victim string
	waitFor(t, 5*time.Second, func() string {
		sink.mu.Lock()
		defer sink.mu.Unlock()
		for _, o := range e.observed("web") {
			if !sink.routed[o.Name] {
				victim = o.Name
				return ""
			}
		}
		return "no instance taken out of the load balancer"
	})
	// Not drained: the instance must survive several reconciles (once deleted, it would not
	// come back at desired 1).
	e.waitReconciles(10)
	if len(e.observed("web")) != 2 {
		t.Fatal("instance deleted before it was drained")
	}
	sink.mu.Lock()
	sink.released[victim] = true
	sink.mu.Unlock()
	waitFor(t, 5*time.Second, e.converged("web", 1, ""))
}

func TestSooner(t *testing.T) {
	for _, tt := range []struct{ a, b, want time.Duration }{
		{0, 0, 0}, {0, 3, 3}, {3, 0, 3}, {2, 3, 2}, {3, 2, 2}, {-1, 2, 2},
	} {
		if got := sooner(tt.a, tt.b); got != tt.want {
			t.Errorf("sooner(%d, %d) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
