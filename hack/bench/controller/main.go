// Command controller benchmarks herd's controller at scale: 50 fleets of 100 instances on the fake
// provider, with the real bbolt store on disk. It measures
//
//   - create: from an empty provider to 5,000 Ready instances with statuses written;
//   - restart resync: a new controller (cold caches) on the same store and provider, until every
//     instance is observed and every fleet's status is written again;
//   - adopt resync: the same with every instance record gone, so all 5,000 are adopted and written;
//   - steady CPU over a window with nothing changing, and the process's RSS.
//
// The last line is the figure `make bench-controller` reports.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/bolt"
)

func main() {
	fleets := flag.Int("fleets", 50, "number of fleets")
	perFleet := flag.Int("instances", 100, "instances per fleet")
	steady := flag.Duration("steady", 20*time.Second, "window over which steady-state CPU is measured")
	flag.Parse()
	total := *fleets * *perFleet

	dir, err := os.MkdirTemp("", "herd-bench-controller-")
	check(err)
	defer os.RemoveAll(dir)
	st, err := bolt.Open(filepath.Join(dir, "state.db"))
	check(err)
	defer st.Close()
	prov, err := fake.New(fake.Options{})
	check(err)
	ctx := context.Background()

	for i := range *fleets {
		desired := int32(*perFleet)
		f := &v1alpha1.Fleet{
			TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
			Metadata: v1alpha1.ObjectMeta{Name: fmt.Sprintf("fleet-%02d", i), Generation: 1},
			Spec: v1alpha1.FleetSpec{
				Image: "sha256:bench", Replicas: v1alpha1.Replicas{Desired: &desired, Max: &desired},
				// A listener makes the controller poll the load balancer's view every second, as
				// it does for a real fleet.
				Listeners: []v1alpha1.Listener{{Port: int32(20000 + i), InstancePort: 30080}},
			},
		}
		v1alpha1.SetFleetDefaults(f, fake.Name)
		op, err := store.PutOp(store.Fleets, f)
		check(err)
		_, err = st.Txn(ctx, op)
		check(err)
	}

	createS := run(st, prov, total)
	fmt.Printf("create: %d instances Ready with statuses written in %.2fs\n", total, createS)

	restartS := run(st, prov, total)
	fmt.Printf("restart resync: %.2fs\n", restartS)

	// Lose every instance record: the controller must adopt all of them.
	recs, _, err := st.List(ctx, store.Instances)
	check(err)
	var ops []store.Op
	for _, r := range recs {
		ops = append(ops, store.Op{Type: store.OpDelete, Kind: store.Instances, Name: r.Name})
	}
	_, err = st.Txn(ctx, ops...)
	check(err)
	ctrl, cancel, adoptS := start(st, prov, total)
	fmt.Printf("adopt resync: %.2fs (%d instance records rewritten)\n", adoptS, total)

	// Steady state: nothing changes; the controller keeps resyncing every fleet.
	runtime.GC()
	cpu0, t0 := cpuSeconds(), time.Now()
	rec0 := ctrl.Reconciles()
	time.Sleep(*steady)
	cores := (cpuSeconds() - cpu0) / time.Since(t0).Seconds()
	fmt.Printf("steady: %d reconciles in %s\n", ctrl.Reconciles()-rec0, *steady)
	rss := rssMB()
	cancel()

	resync := max(restartS, adoptS)
	fmt.Printf("controller: instances=%d resync_s=%.2f steady_cpu_cores=%.3f rss_mb=%d\n", total, resync, cores, rss)
}

// run starts a controller, waits until it has converged, stops it and returns the seconds taken.
func run(st store.Store, prov provider.Provider, total int) float64 {
	_, cancel, s := start(st, prov, total)
	cancel()
	return s
}

// start starts a controller and returns once every instance is Ready in the store and every
// fleet's status is written after the start.
func start(st store.Store, prov provider.Provider, total int) (*controller.Controller, func(), float64) {
	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	ctrl, err := controller.New(controller.Options{Store: st, Providers: map[string]provider.Provider{fake.Name: prov}, Logger: log, Health: allHealthy{}})
	check(err)
	begin := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ctrl.Start(ctx); err != nil {
			panic(err)
		}
	}()
	deadline := begin.Add(5 * time.Minute)
	for !converged(st, total, ctrl) {
		if time.Now().After(deadline) {
			panic("controller did not converge within 5 minutes")
		}
		time.Sleep(20 * time.Millisecond)
	}
	secs := time.Since(begin).Seconds()
	return ctrl, func() { cancel(); <-done }, secs
}

func converged(st store.Store, total int, ctrl *controller.Controller) bool {
	if !ctrl.Synced() {
		return false
	}
	ctx := context.Background()
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, st, store.Fleets)
	check(err)
	for _, f := range fleets {
		// Synced means this controller reconciled every fleet once; each must now be Ready.
		if f.Status.Phase != "Ready" || int(f.Status.ReadyReplicas) != int(*f.Spec.Replicas.Desired) {
			return false
		}
	}
	insts, _, err := store.ListObjects[v1alpha1.Instance](ctx, st, store.Instances)
	check(err)
	ready := 0
	for _, in := range insts {
		if in.Status.Phase == v1alpha1.PhaseReady {
			ready++
		}
	}
	return ready == total && len(insts) == total
}

// allHealthy stands in for the load balancer: every instance healthy, no errors.
type allHealthy struct{}

func (allHealthy) InstanceHealth(string) (string, time.Time) { return "healthy", time.Time{} }
func (allHealthy) InstanceStats(string) (uint64, uint64)     { return 1000, 0 }

func cpuSeconds() float64 {
	var ru syscall.Rusage
	check(syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

func rssMB() int {
	data, err := os.ReadFile("/proc/self/status")
	check(err)
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			return kb / 1024
		}
	}
	return -1
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
