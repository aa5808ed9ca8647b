package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/storetest"
)

// handle is a running controller and what its start-up took.
type handle struct {
	ctrl       *controller.Controller
	stop       func()
	took       float64 // seconds from Start until converged
	reconciles int64
	writes     int64 // store transactions until converged
}

// start starts a controller on st and returns once it has reconciled every fleet and holds every
// instance Ready, with every fleet's status Ready in the store; it then checks that the store
// holds every instance record Ready (outside the time measured).
func (b bench) start(st *storetest.Counting, prov *fake.Provider, phase string) handle {
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctrl, err := controller.New(controller.Options{Store: st, Providers: map[string]provider.Provider{fake.Name: prov}, Logger: log, Health: allHealthy{}})
	check(err)
	stopProfile := b.cpuProfile(phase)
	writes0 := st.Writes.Load()
	begin := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ctrl.Start(ctx); err != nil {
			panic(err)
		}
	}()
	deadline := begin.Add(5 * time.Minute)
	for !b.converged(ctrl) {
		if time.Now().After(deadline) {
			panic(fmt.Sprintf("%s %s: the controller did not converge within 5 minutes", b.label, phase))
		}
		time.Sleep(50 * time.Millisecond)
	}
	took := time.Since(begin).Seconds()
	stopProfile()
	h := handle{ctrl: ctrl, took: took, reconciles: ctrl.Reconciles(), writes: st.Writes.Load() - writes0,
		stop: func() { cancel(); <-done }}
	b.checkRecords()
	return h
}

// converged reports whether ctrl reconciled every fleet once, holds every instance Ready, and
// every fleet's stored status says Ready. It reads the controller's counts, not the store's 50,000
// records, so that checking disturbs the measurement little.
func (b bench) converged(ctrl *controller.Controller) bool {
	if !ctrl.Synced() {
		return false
	}
	// The controller's counts first, from memory: the store is read only once they are right.
	for i := range b.fleets {
		if ready, booting := ctrl.InstanceCounts(fleetName(i)); ready != b.perFleet || booting != 0 {
			return false
		}
	}
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](context.Background(), b.store, store.Fleets)
	check(err)
	for _, f := range fleets {
		ready, booting := ctrl.InstanceCounts(f.Metadata.Name)
		if f.Status.Phase != "Ready" || int(f.Status.ReadyReplicas) != b.perFleet || ready != b.perFleet || booting != 0 {
			return false
		}
	}
	return len(fleets) == b.fleets
}

// checkRecords fails the benchmark unless the store holds every instance record, Ready.
func (b bench) checkRecords() {
	insts, _, err := store.ListObjects[v1alpha1.Instance](context.Background(), b.store, store.Instances)
	check(err)
	ready := 0
	for _, in := range insts {
		if in.Status.Phase == v1alpha1.PhaseReady {
			ready++
		}
	}
	if total := b.fleets * b.perFleet; ready != total || len(insts) != total {
		check(fmt.Errorf("%s: the store holds %d instance records, %d Ready; want %d", b.label, len(insts), ready, total))
	}
}

// quiesce waits until the store has seen no write for a second (at most a minute).
func quiesce(st *storetest.Counting) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		n := st.Writes.Load()
		time.Sleep(time.Second)
		if st.Writes.Load() == n {
			return
		}
	}
	check(fmt.Errorf("the store was still written a minute after the controller converged"))
}

// steadyWindow is what one steady window cost.
type steadyWindow struct {
	cores                            float64
	reconciles, reads, writes, lists int64
}

// window measures the process over b.steady with nothing changing.
func (b bench) window(h handle, st *storetest.Counting, prov *fake.Provider) steadyWindow {
	runtime.GC()
	stopProfile := b.cpuProfile("steady")
	rec0, reads0, writes0, lists0 := h.ctrl.Reconciles(), st.Reads.Load(), st.Writes.Load(), prov.Calls("List")
	cpu0, t0 := cpuSeconds(), time.Now()
	time.Sleep(b.steady)
	w := steadyWindow{
		cores:      (cpuSeconds() - cpu0) / time.Since(t0).Seconds(),
		reconciles: h.ctrl.Reconciles() - rec0,
		reads:      st.Reads.Load() - reads0,
		writes:     st.Writes.Load() - writes0,
		lists:      int64(prov.Calls("List") - lists0),
	}
	stopProfile()
	return w
}

// allHealthy stands in for the load balancer: every instance healthy, no errors. Like herd's load
// balancer it notifies changes, and nothing ever changes.
type allHealthy struct{}

func (allHealthy) InstanceHealth(string) (string, time.Time)            { return "healthy", time.Time{} }
func (allHealthy) InstanceStats(string) (uint64, uint64)                { return 1000, 0 }
func (allHealthy) NotifyHealth(func(controller.HealthChange)) (ok bool) { return true }

// cpuProfile starts a CPU profile of a phase when profiles are asked for; the result stops it.
func (b bench) cpuProfile(phase string) (stop func()) {
	if b.profiles == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(b.profiles, b.label+"-"+phase+".cpu"))
	check(err)
	check(pprof.StartCPUProfile(f))
	return func() {
		pprof.StopCPUProfile()
		check(f.Close())
	}
}

func (b bench) writeHeapProfile() {
	if b.profiles == "" {
		return
	}
	f, err := os.Create(filepath.Join(b.profiles, b.label+".heap"))
	check(err)
	check(pprof.WriteHeapProfile(f))
	check(f.Close())
}

func cpuSeconds() float64 {
	var ru syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func rssMB() int {
	data, err := os.ReadFile("/proc/self/status")
	check(err)
	for line := range strings.SplitSeq(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kb / 1024
		}
	}
	return -1
}

// loadAverage is the machine's 1, 5 and 15 minute load averages, printed next to CPU figures
// because other work on a shared machine moves them.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
