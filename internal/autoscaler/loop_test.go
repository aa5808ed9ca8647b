package autoscaler

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/events/eventstest"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// fakeLoad is a LoadSource whose requests per second the test sets; it counts the questions.
type fakeLoad struct {
	mu    sync.Mutex
	rps   float64
	asked int
	// byRegion holds per-region figures, by "fleet/region", for regionLoad.
	byRegion map[string]float64
}

func (f *fakeLoad) FleetLoad(string, time.Duration) (Load, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	return Load{RequestsPerSecond: f.rps, LatencyP95: 10 * time.Millisecond}, true
}

func (f *fakeLoad) set(rps float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rps = rps
}

func (f *fakeLoad) askedTimes() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.asked
}

// fakeView is an InstanceView whose instances the test sets: every fleet has ready instances,
// named <fleet>-<i>.
type fakeView struct {
	mu    sync.Mutex
	ready map[string]int
}

func (v *fakeView) set(fleet string, n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.ready[fleet] = n
}

func (v *fakeView) InstanceCounts(fleet string) (int, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ready[fleet], 0
}

// loopEnv is a loop on a memory store and a fake clock; step moves the clock by one interval and
// returns once the pass it starts has sampled the load.
type loopEnv struct {
	t      *testing.T
	store  store.Store
	clock  *clocktesting.FakeClock
	load   *fakeLoad
	view   *fakeView
	events *eventstest.Recorder
	loop   *Loop
}

const interval = 500 * time.Millisecond

func newLoopEnv(t *testing.T, cpu CPUSource) *loopEnv {
	load, view := &fakeLoad{}, &fakeView{ready: map[string]int{}}
	return startLoopEnv(t, cpu, load, view, load, view)
}

// startLoopEnv starts a loop reading loadSrc and viewSrc, which answer from load and view.
func startLoopEnv(t *testing.T, cpu CPUSource, load *fakeLoad, view *fakeView, loadSrc LoadSource, viewSrc InstanceView) *loopEnv {
	e := &loopEnv{
		t: t, store: memory.New(), clock: clocktesting.NewFakeClock(time.Unix(1000, 0)),
		load: load, view: view, events: &eventstest.Recorder{},
	}
	l, err := NewLoop(LoopOptions{Store: e.store, Instances: viewSrc, Events: e.events, Load: loadSrc, CPU: cpu,
		Interval: interval, Clock: e.clock, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.loop = l
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("loop stopped with %v", err)
		}
	})
	e.poll("the loop's ticker", func() bool { return e.clock.HasWaiters() })
	return e
}

func (e *loopEnv) poll(what string, cond func() bool) {
	e.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return cond(), nil
	})
	if err != nil {
		e.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// step runs one pass. A pass is over once the next one has sampled, so step also waits for the
// previous pass's write.
func (e *loopEnv) step() {
	e.t.Helper()
	asked := e.load.askedTimes()
	e.clock.Step(interval)
	e.poll("a pass", func() bool { return e.load.askedTimes() > asked })
}

func (e *loopEnv) put(f *v1alpha1.Fleet) {
	e.t.Helper()
	op, err := store.PutOp(store.Fleets, f)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.store.Txn(context.Background(), op); err != nil {
		e.t.Fatal(err)
	}
}

func (e *loopEnv) desired(name string) int32 {
	e.t.Helper()
	f, err := store.GetObject[v1alpha1.Fleet](context.Background(), e.store, store.Fleets, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return *f.Spec.Replicas.Desired
}

func autoscaled(name string, metric v1alpha1.AutoscalingMetric, target float64, minN, maxN int32, window time.Duration) *v1alpha1.Fleet {
	f := &v1alpha1.Fleet{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: name, Generation: 1},
		Spec: v1alpha1.FleetSpec{
			Image:       "img",
			Replicas:    v1alpha1.Replicas{Min: new(minN), Max: new(maxN), Desired: new(max(minN, 1))},
			Autoscaling: &v1alpha1.Autoscaling{Metric: metric, Target: target},
		},
	}
	if window > 0 {
		f.Spec.Autoscaling.ScaleInStabilization = &v1alpha1.Duration{Duration: window}
	}
	v1alpha1.SetFleetDefaults(f, "fake")
	return f
}

// A load step from 1x to 4x the target raises desired to 4 once the breach is sustained; when the
// load stops, desired comes down only once the stabilization window has passed since the last busy
// sample. Time is the fake clock's: nothing waits for the window.
func TestLoopScalesOutAndInAfterTheWindow(t *testing.T) {
	e := newLoopEnv(t, nil)
	const window = time.Minute
	e.put(autoscaled("web", v1alpha1.MetricRequestsPerSecond, 10, 1, 10, window))
	e.view.set("web", 1)

	e.load.set(10) // 1x the target
	for range 4 {
		e.step()
	}
	if d := e.desired("web"); d != 1 {
		t.Fatalf("desired %d at 1x the target, want 1", d)
	}

	e.load.set(40) // 4x: the first sample starts the breach, the next sustains it
	e.step()
	e.step()
	e.step() // the previous pass has written
	if d := e.desired("web"); d != 4 {
		t.Fatalf("desired %d after a sustained 4x breach, want 4", d)
	}
	e.view.set("web", 4)

	e.load.set(0)
	lastBusy := e.clock.Now()
	for e.clock.Now().Sub(lastBusy) < window-interval {
		e.step()
		if d := e.desired("web"); d != 4 {
			t.Fatalf("desired %d %s after the last busy sample, inside the %s window", d, e.clock.Now().Sub(lastBusy), window)
		}
	}
	for range 4 {
		e.step()
	}
	if d := e.desired("web"); d != 1 {
		t.Fatalf("desired %d after the window, want 1", d)
	}
	if got, want := fmt.Sprint(e.events.Reasons()), fmt.Sprint([]string{ReasonScaledOut, ReasonScaledIn}); got != want {
		t.Fatalf("events %s, want %s", got, want)
	}
}

// fakeCPU is a CPUSource whose per-instance figure the test sets.
type fakeCPU struct {
	mu      sync.Mutex
	percent float64
}

func (f *fakeCPU) FleetCPU(string) (float64, int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.percent, 1, f.percent > 0
}

// A fleet autoscaled on cpu follows its agents' figure, and only its serving instances are the CPU
// source's scrape targets.
func TestLoopOnCPU(t *testing.T) {
	cpu := &fakeCPU{}
	e := newLoopEnv(t, cpu)
	e.put(autoscaled("web", v1alpha1.MetricCPU, 50, 1, 5, 0))
	e.put(autoscaled("api", v1alpha1.MetricRequestsPerSecond, 50, 1, 5, 0))
	e.view.set("web", 1)
	e.view.set("api", 1)
	e.step()
	e.step()
	cpu.mu.Lock()
	cpu.percent = 150 // three times the target on the one instance
	cpu.mu.Unlock()
	for range 3 {
		e.step()
	}
	if d := e.desired("web"); d != 3 {
		t.Fatalf("desired %d at 150%% cpu against a 50%% target, want 3", d)
	}
	if d := e.desired("api"); d != 1 {
		t.Fatalf("desired of the fleet on requests per second moved to %d", d)
	}
}
