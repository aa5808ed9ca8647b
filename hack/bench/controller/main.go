// Command controller benchmarks herd's controller at scale on the fake provider: 500 fleets of 100
// instances (50,000) on the real bbolt store on disk, then 50 fleets of 100 (5,000) on a real
// 3-member etcd cluster of Debian's etcd on loopback. Every fleet has a listener, so the
// controller judges its instances through the load balancer's view (a stand-in reporting every
// instance healthy, which notifies changes as herd's load balancer does). On each store it measures
//
//   - create: from an empty provider to every instance Ready with statuses written;
//   - restart resync: a new controller (cold caches) on the same store and provider, until it has
//     reconciled every fleet once and holds every instance Ready;
//   - adopt resync: the same with every instance record gone, so all of them are adopted and
//     written again (a store restored from an old copy);
//   - steady: the CPU of the whole process (controller, bbolt, fake provider) over a window with
//     nothing changing, from the process's own rusage, with the reconciles, store calls and
//     provider calls made in the window; then the process's RSS.
//
// Then, on a bbolt store of its own, the DNS route computation as herd up runs it (the informer
// and routes.Live) over 500 fleets with spec.global in 4 regions, 100 Ready instance records each
// (50,000): its steady CPU with nothing changing, and how long after an instance turns Unhealthy
// the computed routes change.
//
// The last line is the figure `make bench-controller` reports.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/bolt"
	"herd.dev/herd/internal/store/storetest"
)

func main() {
	fleets := flag.Int("fleets", 500, "number of fleets on bbolt")
	perFleet := flag.Int("instances", 100, "instances per fleet")
	etcdFleets := flag.Int("etcd-fleets", 50, "number of fleets on etcd (0 skips the etcd run)")
	steady := flag.Duration("steady", 20*time.Second, "window over which steady-state CPU is measured")
	routeFleets := flag.Int("routes-fleets", 500, "fleets with spec.global in the routes run (0 skips it)")
	profiles := flag.String("profile-dir", "", "write CPU profiles of each phase and a heap profile of the bbolt run there")
	flag.Parse()

	dir, err := os.MkdirTemp("", "herd-bench-controller-")
	check(err)
	defer os.RemoveAll(dir)

	fmt.Printf("load average at start: %s\n", loadAverage())
	st, err := bolt.Open(filepath.Join(dir, "state.db"))
	check(err)
	b := bench{store: st, fleets: *fleets, perFleet: *perFleet, steady: *steady, profiles: *profiles, label: "bbolt"}
	boltFig := b.run()
	check(st.Close())

	var routeFig routeFigures
	if *routeFleets > 0 {
		routeFig = runRoutes(dir, *routeFleets, *perFleet, *steady)
	}

	etcdFig := figures{}
	if *etcdFleets > 0 {
		es, stop := startEtcd(filepath.Join(dir, "etcd"), *perFleet)
		e := bench{store: es, fleets: *etcdFleets, perFleet: *perFleet, steady: *steady, label: "etcd"}
		etcdFig = e.run()
		check(es.Close())
		stop()
	}
	fmt.Printf("load average at end: %s\n", loadAverage())
	fmt.Printf("controller: instances=%d resync_s=%.2f steady_cpu_cores=%.3f rss_mb=%d routes_refresh_cpu_cores=%.4f routes_change_s=%.3f etcd_instances=%d etcd_resync_s=%.2f\n",
		boltFig.instances, boltFig.resync, boltFig.steadyCores, boltFig.rssMB, routeFig.cores, routeFig.changeS, etcdFig.instances, etcdFig.resync)
}

// bench is one run of every phase on one store.
type bench struct {
	store            store.Store
	fleets, perFleet int
	steady           time.Duration
	profiles         string // directory for profiles, "" for none
	label            string
}

type figures struct {
	instances   int
	resync      float64 // the slower of the restart and adopt resyncs, in seconds
	steadyCores float64
	rssMB       int
}

func (b bench) run() figures {
	ctx := context.Background()
	total := b.fleets * b.perFleet
	counted := &storetest.Counting{Store: b.store}
	prov, err := fake.New(fake.Options{})
	check(err)
	for i := range b.fleets {
		op, err := store.PutOp(store.Fleets, fleet(i, b.perFleet))
		check(err)
		_, err = b.store.Txn(ctx, op)
		check(err)
	}
	fmt.Printf("%s: %d fleets of %d instances\n", b.label, b.fleets, b.perFleet)

	h := b.start(counted, prov, "create")
	h.stop()
	fmt.Printf("%s create: %d instances Ready with statuses written in %.2fs\n", b.label, total, h.took)

	h = b.start(counted, prov, "restart")
	h.stop()
	restart := h.took
	fmt.Printf("%s restart resync: %.2fs (%d reconciles, %d store writes)\n", b.label, restart, h.reconciles, h.writes)

	// Lose every instance record: the controller must adopt all of them.
	deleteInstanceRecords(ctx, b.store)
	h = b.start(counted, prov, "adopt")
	adopt := h.took
	fmt.Printf("%s adopt resync: %.2fs (%d instance records rewritten)\n", b.label, adopt, total)

	// Steady state: nothing changes, so nothing should happen. The window starts once the writes
	// that trail the adoption (its events, one transaction each) are done.
	quiesce(counted)
	w := b.window(h, counted, prov)
	fmt.Printf("%s steady: %.3f core over %s (load average %s): %d reconciles, %d store reads, %d store writes, %d provider lists\n",
		b.label, w.cores, b.steady, loadAverage(), w.reconciles, w.reads, w.writes, w.lists)
	rss := rssMB()
	fmt.Printf("%s rss: %d MB\n", b.label, rss)
	b.writeHeapProfile()
	h.stop()
	return figures{instances: total, resync: max(restart, adopt), steadyCores: w.cores, rssMB: rss}
}

// fleet is the i-th fleet of the benchmark: perFleet instances and a listener, so that the
// controller judges its instances through the load balancer's view as it does for a real fleet.
func fleet(i, perFleet int) *v1alpha1.Fleet {
	desired := int32(perFleet)
	f := &v1alpha1.Fleet{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: fleetName(i), Generation: 1},
		Spec: v1alpha1.FleetSpec{
			Image: "sha256:bench", Replicas: v1alpha1.Replicas{Desired: &desired, Max: &desired},
			Listeners: []v1alpha1.Listener{{Port: int32(20000 + i), InstancePort: 30080}},
		},
	}
	v1alpha1.SetFleetDefaults(f, fake.Name)
	return f
}

func fleetName(i int) string { return fmt.Sprintf("fleet-%03d", i) }

// deleteInstanceRecords deletes every instance record, in transactions of at most 100 ops (within
// etcd's default limit of 128).
func deleteInstanceRecords(ctx context.Context, st store.Store) {
	recs, _, err := st.List(ctx, store.Instances)
	check(err)
	for len(recs) > 0 {
		n := min(len(recs), 100)
		ops := make([]store.Op, 0, n)
		for _, r := range recs[:n] {
			ops = append(ops, store.Op{Type: store.OpDelete, Kind: store.Instances, Name: r.Name})
		}
		_, err := st.Txn(ctx, ops...)
		check(err)
		recs = recs[n:]
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
