package controller

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
)

// fakeLoad is a LoadSource whose requests per second the test sets. It remembers when it last
// answered with a rate above zero.
type fakeLoad struct {
	mu       sync.Mutex
	rps      float64
	asked    int
	lastBusy time.Time
}

func (f *fakeLoad) FleetLoad(fleet string, window time.Duration) (Load, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	if f.rps > 0 {
		f.lastBusy = time.Now()
	}
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

func (e *env) desired(fleet string) int32 { return *e.fleet(fleet).Spec.Replicas.Desired }

// startAutoscaler runs an autoscaler of e's controller until the test ends.
func (e *env) startAutoscaler(opts AutoscalerOptions) *Autoscaler {
	e.t.Helper()
	as, err := e.ctrl.NewAutoscaler(opts)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- as.Start(ctx) }()
	e.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("autoscaler stopped with %v", err)
		}
	})
	return as
}

// A load step from 1x to 4x the target raises desired to 4; when the load stops, desired comes
// down only after the stabilization window, counted from the last busy sample.
func TestAutoscalerLoop(t *testing.T) {
	e := newEnv(t, nil, nil)
	load := &fakeLoad{}
	e.startAutoscaler(AutoscalerOptions{Load: load})

	const window = 1500 * time.Millisecond
	f := fleetSpec("web", "img", 1)
	f.Spec.Replicas.Min, f.Spec.Replicas.Max = new(int32(1)), new(int32(10))
	f.Spec.Autoscaling = &v1alpha1.Autoscaling{Metric: v1alpha1.MetricRequestsPerSecond, Target: 10, ScaleInStabilization: &v1alpha1.Duration{Duration: window}}
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 1, ""))

	// 1x the target: nothing changes over several samples.
	load.set(10)
	asked := load.askedTimes()
	waitFor(t, 5*time.Second, func() string {
		if n := load.askedTimes() - asked; n < 4 {
			return fmt.Sprintf("%d samples at 1x", n)
		}
		return ""
	})
	if d := e.desired("web"); d != 1 {
		t.Fatalf("desired %d at 1x the target, want 1", d)
	}

	// 4x the target.
	step := time.Now()
	load.set(40)
	waitFor(t, 5*time.Second, func() string {
		if d := e.desired("web"); d < 4 {
			return fmt.Sprintf("desired %d, want 4", d)
		}
		return ""
	})
	// A figure, not an assertion (make bench-autoscale measures it on real instances).
	t.Logf("scale-out decision %s after the load step", time.Since(step))
	if d := e.desired("web"); d != 4 {
		t.Fatalf("desired %d at 4x the target, want 4", d)
	}
	waitFor(t, 5*time.Second, e.converged("web", 4, ""))

	// The load stops: scale in only after the window.
	load.set(0)
	waitFor(t, 10*time.Second, func() string {
		if d := e.desired("web"); d != 1 {
			return fmt.Sprintf("desired %d, want 1", d)
		}
		return ""
	})
	// The event is recorded just after the write of desired.
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonScaledIn, 1))
	in := e.events(ReasonScaledIn)
	if len(in) != 1 {
		t.Fatalf("%d ScaledIn events, want 1", len(in))
	}
	load.mu.Lock()
	quiet := in[0].Time.Sub(load.lastBusy)
	load.mu.Unlock()
	t.Logf("scale-in %s after the last busy sample (window %s)", quiet, window)
	if quiet < window {
		t.Fatalf("scaled in %s after the last busy sample, before the %s stabilization window", quiet, window)
	}
	waitFor(t, 5*time.Second, e.converged("web", 1, ""))
	if n := len(e.events(ReasonScaledOut)); n != 1 {
		t.Fatalf("%d ScaledOut events, want 1", n)
	}
}

// fakeCPU is a CPUSource for a fleet whose total CPU use the test sets: the figure is that total
// spread over the fleet's ready instances, as a load balanced over them would be.
type fakeCPU struct {
	mu    sync.Mutex
	total float64
	ready func() int
}

func (f *fakeCPU) FleetCPU(fleet string) (float64, int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.ready()
	if f.total == 0 || n == 0 {
		return 0, 0, false
	}
	return f.total / float64(n), n, true
}

// A fleet autoscaled on cpu follows its agents' figure, and its serving instances (only its own)
// are the CPU source's scrape targets.
func TestAutoscalerOnCPU(t *testing.T) {
	e := newEnv(t, nil, nil)
	cpu := &fakeCPU{ready: func() int {
		n := 0
		for _, o := range e.observed("web") {
			if o.State == provider.StateReady {
				n++
			}
		}
		return n
	}}
	as := e.startAutoscaler(AutoscalerOptions{Load: &fakeLoad{}, CPU: cpu, Interval: 50 * time.Millisecond})
	f := fleetSpec("web", "img", 1)
	f.Spec.Replicas.Min, f.Spec.Replicas.Max = new(int32(1)), new(int32(5))
	f.Spec.Autoscaling = &v1alpha1.Autoscaling{Metric: v1alpha1.MetricCPU, Target: 50}
	e.put(f)
	other := fleetSpec("api", "img", 1)
	other.Spec.Autoscaling = &v1alpha1.Autoscaling{Metric: v1alpha1.MetricRequestsPerSecond, Target: 50}
	e.put(other)
	waitFor(t, 5*time.Second, e.converged("web", 1, ""))
	waitFor(t, 5*time.Second, e.converged("api", 1, ""))
	waitFor(t, 5*time.Second, func() string {
		targets := as.CPUTargets()
		if len(targets) != 1 || targets[0].Fleet != "web" || targets[0].Address == "" || targets[0].Instance != e.observed("web")[0].Name {
			return fmt.Sprintf("cpu scrape targets %+v, want the one instance of web with its address", targets)
		}
		return ""
	})

	// Three times the target on the one instance: three instances.
	cpu.mu.Lock()
	cpu.total = 150
	cpu.mu.Unlock()
	waitFor(t, 5*time.Second, func() string {
		if d := e.desired("web"); d != 3 {
			return fmt.Sprintf("desired %d at 150%% cpu against a 50%% target, want 3", d)
		}
		return ""
	})
	waitFor(t, 5*time.Second, e.converged("web", 3, ""))
	waitFor(t, 5*time.Second, func() string {
		if n := len(as.CPUTargets()); n != 3 {
			return fmt.Sprintf("%d cpu scrape targets, want 3", n)
		}
		return ""
	})
	if d := e.desired("api"); d != 1 {
		t.Fatalf("desired of the fleet on requests per second moved to %d", d)
	}
}
