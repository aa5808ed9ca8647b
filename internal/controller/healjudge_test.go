package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
)

func TestPlanHealing(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	pol := healPolicy{Grace: 60 * time.Second, UnhealthyFor: 2 * time.Second, MaxInProgress: 1}
	old := t0.Add(-time.Hour)
	healthy := func(name string, req, errs uint64) healInput {
		return healInput{Name: name, CreatedAt: old, State: HealthHealthy, Since: old, Requests: req, Errors: errs}
	}
	bad := func(name, state string, created, since time.Time) healInput {
		return healInput{Name: name, CreatedAt: created, State: state, Since: since}
	}
	dead := func(name string, created time.Time) healInput {
		return healInput{Name: name, CreatedAt: created, Failed: "agent exited"}
	}
	tests := []struct {
		name       string
		pol        healPolicy
		insts      []healInput
		inProgress int
		backoff    time.Time
		replace    []string // with reason initial: F failed, U unhealthy, O outlier
		deferred   int
		recheck    bool
	}{
		{name: "all healthy", insts: []healInput{healthy("a", 100, 0), healthy("b", 100, 0), healthy("c", 100, 0)}},
		{name: "unhealthy past threshold", insts: []healInput{healthy("a", 0, 0), bad("b", HealthUnhealthy, old, t0.Add(-3*time.Second))}, replace: []string{"U:b"}},
		{name: "ejected past threshold", insts: []healInput{bad("b", HealthEjected, old, t0.Add(-3*time.Second))}, replace: []string{"U:b"}},
		{name: "unhealthy not long enough", insts: []healInput{bad("b", HealthUnhealthy, old, t0.Add(-time.Second))}, recheck: true},
		{name: "unknown is not judged", insts: []healInput{bad("b", "unknown", old, old)}},
		{name: "within grace", insts: []healInput{bad("b", HealthUnhealthy, t0.Add(-30*time.Second), t0.Add(-29*time.Second))}, recheck: true},
		{name: "grace over, threshold counts from its end", insts: []healInput{bad("b", HealthUnhealthy, t0.Add(-61*time.Second), t0.Add(-60*time.Second))}, recheck: true},
		{name: "grace and threshold over", insts: []healInput{bad("b", HealthUnhealthy, t0.Add(-63*time.Second), t0.Add(-60*time.Second))}, replace: []string{"U:b"}},
		{name: "outlier", insts: []healInput{healthy("a", 100, 1), healthy("b", 100, 2), healthy("c", 100, 30)}, replace: []string{"O:c"}},
		{name: "outlier below 5x median", insts: []healInput{healthy("a", 100, 4), healthy("b", 100, 5), healthy("c", 100, 20)}},
		{name: "outlier needs a minimum of requests", insts: []healInput{healthy("a", 100, 1), healthy("b", 100, 1), healthy("c", 40, 40)}},
		{name: "outlier needs three peers", insts: []healInput{healthy("a", 100, 1), healthy("c", 100, 60)}},
		{name: "no outlier from a few errors in a clean fleet", insts: []healInput{healthy("a", 100, 0), healthy("b", 100, 0), healthy("c", 100, 2)}},
		{name: "outlier within grace is kept", insts: []healInput{healthy("a", 100, 1), healthy("b", 100, 1), {Name: "c", CreatedAt: t0.Add(-time.Second), State: HealthHealthy, Requests: 100, Errors: 90}}},
		{
			name:    "bound: unhealthy first, rest deferred",
			insts:   []healInput{healthy("a", 100, 1), healthy("b", 100, 1), healthy("c", 100, 1), healthy("d", 100, 90), bad("e", HealthUnhealthy, old, old), bad("f", HealthUnhealthy, old, old)},
			replace: []string{"U:e"}, deferred: 2,
		},
		{name: "bound full", insts: []healInput{bad("e", HealthUnhealthy, old, old)}, inProgress: 1, deferred: 1},
		{name: "bound of two", pol: healPolicy{Grace: time.Minute, UnhealthyFor: time.Second, MaxInProgress: 2}, insts: []healInput{bad("e", HealthUnhealthy, old, old), bad("f", HealthUnhealthy, old, old), bad("g", HealthUnhealthy, old, old)}, replace: []string{"U:e", "U:f"}, deferred: 1},
		{name: "backoff holds everything", insts: []healInput{bad("e", HealthUnhealthy, old, old)}, backoff: t0.Add(time.Second), deferred: 1, recheck: true},
		{name: "failed at once, even within grace", insts: []healInput{healthy("a", 0, 0), dead("b", t0.Add(-time.Second))}, replace: []string{"F:b"}},
		{name: "failed before unhealthy", insts: []healInput{bad("a", HealthUnhealthy, old, old), dead("b", old)}, replace: []string{"F:b"}, deferred: 1},
		{name: "failed held by the bound", insts: []healInput{dead("b", old)}, inProgress: 1, deferred: 1},
		{name: "failed held by backoff", insts: []healInput{dead("b", old)}, backoff: t0.Add(time.Second), deferred: 1, recheck: true},
		{name: "backoff over", insts: []healInput{bad("e", HealthUnhealthy, old, old)}, backoff: t0.Add(-time.Second), replace: []string{"U:e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pol
			if tt.pol.MaxInProgress != 0 {
				p = tt.pol
			}
			plan := planHealing(t0, p, tt.insts, tt.inProgress, tt.backoff)
			var got []string
			for _, v := range plan.Replace {
				got = append(got, v.Reason[len("Instance"):len("Instance")+1]+":"+v.Name)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.replace) || plan.Deferred != tt.deferred {
				t.Fatalf("replace %v deferred %d, want %v deferred %d (bad: %+v)", got, plan.Deferred, tt.replace, tt.deferred, plan.Bad)
			}
			if (plan.Recheck > 0) != tt.recheck {
				t.Fatalf("recheck %s, want one: %v", plan.Recheck, tt.recheck)
			}
		})
	}
}

func TestHealBackoff(t *testing.T) {
	for _, tt := range []struct {
		failures int
		want     time.Duration
	}{{0, 0}, {1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {5, 10 * time.Second}, {50, 10 * time.Second}} {
		if got := healBackoff(time.Second, 10*time.Second, tt.failures); got != tt.want {
			t.Errorf("healBackoff(%d) = %s, want %s", tt.failures, got, tt.want)
		}
	}
}

// fakeHealth is a HealthSource set by the test. Instances it was not told about have state def,
// since the first time they were asked about.
type fakeHealth struct {
	mu    sync.Mutex
	def   string
	state map[string]string
	since map[string]time.Time
	seen  map[string]time.Time
	stats map[string][2]uint64
}

func newFakeHealth() *fakeHealth {
	return &fakeHealth{def: HealthHealthy, state: map[string]string{}, since: map[string]time.Time{}, seen: map[string]time.Time{}, stats: map[string][2]uint64{}}
}

func (f *fakeHealth) InstanceHealth(name string) (string, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.state[name]; ok {
		return s, f.since[name]
	}
	if _, ok := f.seen[name]; !ok {
		f.seen[name] = time.Now()
	}
	return f.def, f.seen[name]
}

func (f *fakeHealth) InstanceStats(name string) (uint64, uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats[name]
	return s[0], s[1]
}

func (f *fakeHealth) set(name, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state[name] = state
	f.since[name] = time.Now()
}

func (f *fakeHealth) setDefault(state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.def = state
	f.seen = map[string]time.Time{}
}

// healFleet is a fleet with a listener and fast health checks: unhealthy for 100ms is too long.
func healFleet(name string, desired int32, grace time.Duration) *v1alpha1.Fleet {
	f := fleetSpec(name, "img", desired)
	f.Spec.Listeners = []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}}
	f.Spec.HealthCheck.Interval = &v1alpha1.Duration{Duration: 50 * time.Millisecond}
	f.Spec.HealthCheck.Timeout = &v1alpha1.Duration{Duration: 20 * time.Millisecond}
	f.Spec.HealthCheck.UnhealthyThreshold = 2
	f.Spec.HealthCheck.GracePeriod = &v1alpha1.Duration{Duration: grace}
	return f
}

func newHealEnv(t *testing.T, h *fakeHealth, backoff time.Duration) *env {
	p, err := fake.New(fake.Options{BootDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return startEnv(t, &env{fake: p, health: h, healBackoff: backoff})
}

func (e *env) events(reason string) []*v1alpha1.Event {
	evs, _, err := store.ListObjects[v1alpha1.Event](context.Background(), e.store, store.Events)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []*v1alpha1.Event
	for _, ev := range evs {
		if ev.Reason == reason {
			out = append(out, ev)
		}
	}
	return out
}

// eventsAtLeast says what keeps the store from holding at least n events of reason.
func (e *env) eventsAtLeast(reason string, n int) func() string {
	return func() string {
		if got := len(e.events(reason)); got < n {
			return fmt.Sprintf("%d %s events, want %d", got, reason, n)
		}
		return ""
	}
}

func (e *env) exists(fleet, name string) bool {
	for _, o := range e.observed(fleet) {
		if o.Name == name {
			return true
		}
	}
	return false
}

// replaced says what keeps fleet from having replaced victim and converged back to n instances.
func (e *env) replaced(fleet, victim string, n int) func() string {
	return func() string {
		if e.exists(fleet, victim) {
			return victim + " still there"
		}
		return e.converged(fleet, n, "")()
	}
}

// waitReconciles waits until the controller has done n more reconciles.
func (e *env) waitReconciles(n int64) {
	e.t.Helper()
	target := e.ctrl.Reconciles() + n
	waitFor(e.t, 10*time.Second, func() string {
		if got := e.ctrl.Reconciles(); got < target {
			return fmt.Sprintf("%d reconciles, want %d", got, target)
		}
		return ""
	})
}

// An instance unhealthy past its thresholds is replaced once its grace period is over, and not
// before.
func TestUnhealthyInstanceReplacedAfterGrace(t *testing.T) {
	h := newFakeHealth()
	e := newHealEnv(t, h, time.Second)
	e.put(healFleet("web", 3, 200*time.Millisecond))
	e.put(healFleet("slow", 2, time.Hour))
	waitFor(t, 5*time.Second, e.converged("web", 3, ""))
	waitFor(t, 5*time.Second, e.converged("slow", 2, ""))
	victim, spared := e.observed("web")[0].Name, e.observed("slow")[0].Name
	h.set(victim, HealthUnhealthy)
	h.set(spared, HealthUnhealthy)
	waitFor(t, 5*time.Second, e.replaced("web", victim, 3))
	// Events are written asynchronously, just after the records they describe.
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonInstanceUnhealthy, 1))
	e.waitReconciles(20)
	if !e.exists("slow", spared) {
		t.Fatal("an instance within its grace period was replaced")
	}
}

// An instance whose 5xx rate stands out from its peers is replaced although its checks pass.
func TestOutlierInstanceReplaced(t *testing.T) {
	h := newFakeHealth()
	e := newHealEnv(t, h, time.Second)
	e.put(healFleet("web", 3, 0))
	waitFor(t, 5*time.Second, e.converged("web", 3, ""))
	obs := e.observed("web")
	victim := obs[2].Name
	h.mu.Lock()
	h.stats[obs[0].Name] = [2]uint64{200, 2}
	h.stats[obs[1].Name] = [2]uint64{200, 1}
	h.stats[victim] = [2]uint64{200, 60}
	h.mu.Unlock()
	waitFor(t, 5*time.Second, e.replaced("web", victim, 3))
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonInstanceOutlier, 1))
	evs := e.events(ReasonInstanceOutlier)
	if len(evs) != 1 || evs[0].Object != "Instance/"+victim {
		t.Fatalf("InstanceOutlier events: %+v", evs)
	}
	for _, o := range obs[:2] {
		if !e.exists("web", o.Name) {
			t.Fatalf("peer %s was replaced too", o.Name)
		}
	}
}

// At most max(1, 25% of desired) replacements are under way at once: the next unhealthy instance
// waits until the previous replacement is healthy.
func TestHealingBoundsConcurrentReplacements(t *testing.T) {
	h := newFakeHealth()
	e := newHealEnv(t, h, time.Second)
	e.put(healFleet("web", 4, 0))
	waitFor(t, 5*time.Second, e.converged("web", 4, ""))
	obs := e.observed("web")
	h.set(obs[0].Name, HealthHealthy)
	victims := []string{obs[1].Name, obs[2].Name, obs[3].Name}
	h.setDefault("unknown") // replacements never prove healthy
	for _, v := range victims {
		h.set(v, HealthUnhealthy)
	}
	gone := func() int {
		n := 0
		for _, v := range victims {
			if !e.exists("web", v) {
				n++
			}
		}
		return n
	}
	waitFor(t, 5*time.Second, func() string {
		if n := gone(); n != 1 {
			return fmt.Sprintf("%d victims replaced, want 1", n)
		}
		return ""
	})
	e.waitReconciles(30)
	if n := gone(); n != 1 {
		t.Fatalf("%d unhealthy instances replaced while the first replacement was not healthy yet, want 1", n)
	}
	h.setDefault(HealthHealthy)
	waitFor(t, 10*time.Second, func() string {
		if n := gone(); n != 3 {
			return fmt.Sprintf("%d of 3 victims replaced", n)
		}
		return e.converged("web", 4, "")()
	})
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonInstanceUnhealthy, 3))
	if n := len(e.events(ReasonInstanceUnhealthy)); n != 3 {
		t.Fatalf("%d InstanceUnhealthy events, want 3", n)
	}
}

// Replacements that fail themselves (a broken image) pause healing for a doubling time, each pause
// an event; once replacements are healthy again, the fleet converges.
func TestHealingBacksOffWhenReplacementsFail(t *testing.T) {
	h := newFakeHealth()
	e := newHealEnv(t, h, 100*time.Millisecond)
	e.put(healFleet("web", 2, 0))
	waitFor(t, 5*time.Second, e.converged("web", 2, ""))
	obs := e.observed("web")
	h.set(obs[0].Name, HealthHealthy)
	h.setDefault(HealthUnhealthy) // every new instance is unhealthy from its start
	h.set(obs[1].Name, HealthUnhealthy)
	waitFor(t, 15*time.Second, e.eventsAtLeast(ReasonHealingBackoff, 3))
	evs := e.events(ReasonHealingBackoff)
	for i, want := range []string{"1 in a row): pausing healing for 100ms", "2 in a row): pausing healing for 200ms", "3 in a row): pausing healing for 400ms"} {
		if !strings.Contains(evs[i].Message, want) {
			t.Fatalf("backoff event %d: %q, want it to contain %q", i, evs[i].Message, want)
		}
	}
	if !e.exists("web", obs[0].Name) {
		t.Fatal("the healthy instance was replaced")
	}
	h.setDefault(HealthHealthy)
	waitFor(t, 10*time.Second, e.converged("web", 2, ""))
}

// newBrokenImageEnv is a controller without a health source, healing with a 100ms backoff base,
// on a fake provider whose image img-broken boots and then fails.
func newBrokenImageEnv(t *testing.T) (*env, *fake.Provider) {
	p, err := fake.New(fake.Options{BootDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p.BreakImage("img-broken", "workload crashed")
	return startEnv(t, &env{fake: p, healBackoff: 100 * time.Millisecond}), p
}

// A broken image (instances that boot, then fail) is not booted over and over: failed instances
// keep their place until healing replaces them, one at a time and with a doubling pause, and the
// fleet converges once it names a good image. The fleet has no listeners and the controller no
// health source: the provider's word is enough.
func TestBrokenImageDoesNotThrash(t *testing.T) {
	e, p := newBrokenImageEnv(t)
	const desired = 4
	f := fleetSpec("web", "img-broken", desired)
	e.put(f)
	waitFor(t, 15*time.Second, e.eventsAtLeast(ReasonHealingBackoff, 4))
	// Read the creations first: events only grow, so the bound holds against the later count.
	creates := p.Calls("Create")
	backoffs := e.events(ReasonHealingBackoff)
	// One replacement at a time (max(1, 25% of 4)), each failure pausing healing: the initial
	// instances, one replacement per failure, and at most one more under way.
	if limit := desired + len(backoffs) + 1; creates > limit {
		t.Fatalf("%d instances created for %d failed replacements: more than %d, healing thrashes", creates, len(backoffs), limit)
	}
	for i, want := range []string{"pausing healing for 100ms", "pausing healing for 200ms", "pausing healing for 400ms", "pausing healing for 800ms"} {
		if !strings.Contains(backoffs[i].Message, want) {
			t.Fatalf("backoff event %d: %q, want it to contain %q", i, backoffs[i].Message, want)
		}
	}
	if n := len(e.observed("web")); n > desired {
		t.Fatalf("%d instances exist, want at most %d: failed ones must hold their place", n, desired)
	}
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonInstanceFailed, 1))
	if ev := e.events(ReasonInstanceFailed)[0]; !strings.Contains(ev.Message, "failed: workload crashed") {
		t.Errorf("InstanceFailed event %q does not say why", ev.Message)
	}
	// Why the instances fail is in the fleet's status, up to its conditions.
	st := e.fleet("web").Status
	if st.Healing == nil || !strings.HasPrefix(st.Healing.LastFailure, "instance web-") || !strings.HasSuffix(st.Healing.LastFailure, "failed: workload crashed") {
		t.Errorf("status.healing %+v, want lastFailure naming the instance and the provider's reason", st.Healing)
	}
	for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionDegraded} {
		if c := meta.FindStatusCondition(st.Conditions, typ); c == nil || !strings.Contains(c.Message, "failed: workload crashed") {
			t.Errorf("condition %s %+v does not say why the instances fail", typ, c)
		}
	}
	f.Spec.Image = "img-good"
	e.put(f)
	waitFor(t, 15*time.Second, e.converged("web", desired, RevisionName(f)))
	waitFor(t, 5*time.Second, func() string {
		st := e.fleet("web").Status
		if st.Healing != nil && st.Healing.LastFailure != "" {
			return "lastFailure still " + st.Healing.LastFailure
		}
		for _, c := range st.Conditions {
			if strings.Contains(c.Message, "workload crashed") {
				return fmt.Sprintf("condition %s still gives the old failure: %s", c.Type, c.Message)
			}
		}
		return ""
	})
}

// A restarted controller keeps healing's count of failed replacements and its backoff from the
// fleet's status: the next pause doubles the last one instead of starting over.
func TestHealingBackoffSurvivesRestart(t *testing.T) {
	e, _ := newBrokenImageEnv(t)
	e.put(fleetSpec("web", "img-broken", 2))
	waitFor(t, 15*time.Second, e.eventsAtLeast(ReasonHealingBackoff, 2))
	e.stop()
	before := len(e.events(ReasonHealingBackoff))
	h := e.fleet("web").Status.Healing
	if h == nil || int(h.Failures) != before {
		t.Fatalf("status.healing %+v after %d failed replacements, want them counted", h, before)
	}
	e.start()
	waitFor(t, 15*time.Second, e.eventsAtLeast(ReasonHealingBackoff, before+1))
	next := e.events(ReasonHealingBackoff)[before]
	want := fmt.Sprintf("%d in a row): pausing healing for %s", before+1, healBackoff(100*time.Millisecond, 800*time.Millisecond, before+1))
	if !strings.Contains(next.Message, want) {
		t.Fatalf("first backoff after the restart: %q, want it to contain %q", next.Message, want)
	}
}
