package main

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/bolt"
)

// benchRegions are the regions of every fleet of the routes run.
var benchRegions = []string{"eu", "us", "ap", "sa"}

// routeFigures are what keeping the DNS routes current costs.
type routeFigures struct {
	cores   float64 // steady CPU of the informer and the route computation, nothing changing
	changeS float64 // the slowest of a few: an instance turns Unhealthy until the routes show it
}

// runRoutes measures the route computation as herd up runs it (one informer, routes.Live) on a
// bbolt store of its own holding fleets fleets with spec.global in four regions and perFleet Ready
// instance records each, spread evenly over the regions.
func runRoutes(dir string, fleets, perFleet int, steady time.Duration) routeFigures {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := bolt.Open(filepath.Join(dir, "routes.db"))
	check(err)
	defer func() { check(st.Close()) }()
	insts := writeGlobalFleets(ctx, st, fleets, perFleet)
	fmt.Printf("routes: %d fleets with spec.global in %d regions, %d Ready instance records\n", fleets, len(benchRegions), len(insts))

	changes := make(chan routes.Table, 16)
	inf := informer.New(informer.Options{Store: st})
	live := routes.NewLive(routes.LiveOptions{Informer: inf, LB: regionLBs{}, OnChange: func(t routes.Table) {
		select {
		case changes <- t:
		default:
		}
	}})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { check(inf.Start(ctx)) })
	wg.Go(func() { check(live.Start(ctx)) })
	begin := time.Now()
	<-changes
	fmt.Printf("routes: first table of %d hostnames in %.2fs\n", fleets, time.Since(begin).Seconds())
	drain(changes)

	cpu0, t0 := cpuSeconds(), time.Now()
	time.Sleep(steady)
	fig := routeFigures{cores: (cpuSeconds() - cpu0) / time.Since(t0).Seconds()}
	fmt.Printf("routes steady: %.4f core over %s (load average %s), %d table changes\n", fig.cores, steady, loadAverage(), len(changes))

	// Instances turn Unhealthy one at a time: how long until the computed routes count one Ready
	// instance fewer in that instance's region.
	const tries = 5
	for n := range tries {
		in := insts[n*len(insts)/tries]
		drain(changes)
		in.Status.Phase = v1alpha1.PhaseUnhealthy
		start := time.Now()
		check(store.PutObject(ctx, st, store.Instances, in))
		want := int32(perFleet/len(benchRegions) - 1)
		for deadline := time.After(time.Minute); ; {
			var t routes.Table
			select {
			case t = <-changes:
			case <-deadline:
				check(fmt.Errorf("routes: %s turned Unhealthy, and the routes did not change within a minute", in.Metadata.Name))
			}
			if regionReady(t, in.Spec.Fleet, in.Spec.Region) == want {
				break
			}
		}
		took := time.Since(start).Seconds()
		fig.changeS = max(fig.changeS, took)
		fmt.Printf("routes change %d: %s Unhealthy, routes changed after %.3fs\n", n+1, in.Metadata.Name, took)
	}
	return fig
}

// writeGlobalFleets writes the fleets and their Ready instance records, and returns the records.
func writeGlobalFleets(ctx context.Context, st store.Store, fleets, perFleet int) []*v1alpha1.Instance {
	var all []*v1alpha1.Instance
	var ops []store.Op
	flush := func() {
		if len(ops) > 0 {
			recs, err := st.Txn(ctx, ops...)
			check(err)
			for i, r := range recs {
				if r.Kind == store.Instances {
					all[len(all)-len(recs)+i].Metadata.ResourceVersion = r.ResourceVersion
				}
			}
			ops = ops[:0]
		}
	}
	for i := range fleets {
		name := fmt.Sprintf("global-%03d", i)
		f := &v1alpha1.Fleet{
			TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
			Metadata: v1alpha1.ObjectMeta{Name: name, Generation: 1},
			Spec: v1alpha1.FleetSpec{Image: "sha256:bench",
				Global: &v1alpha1.Global{Hostname: name + ".bench.test", Policy: v1alpha1.PolicyFailover}},
		}
		for _, r := range benchRegions {
			f.Spec.Regions = append(f.Spec.Regions, v1alpha1.Region{Name: r})
		}
		op, err := store.PutOp(store.Fleets, f)
		check(err)
		_, err = st.Txn(ctx, op)
		check(err)
		for j := range perFleet {
			in := &v1alpha1.Instance{
				TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindInstance},
				Metadata: v1alpha1.ObjectMeta{Name: fmt.Sprintf("%s-%03d", name, j)},
				Spec:     v1alpha1.InstanceSpec{Fleet: name, Region: benchRegions[j%len(benchRegions)], Revision: "r1"},
				Status:   v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseReady, Address: "10.0.0.1"},
			}
			op, err := store.PutOp(store.Instances, in)
			check(err)
			all = append(all, in)
			ops = append(ops, op)
		}
		flush()
	}
	return all
}

// regionReady is the count of Ready instances the table gives a fleet's region (-1: not there).
func regionReady(t routes.Table, fleet, region string) int32 {
	for _, r := range t.Routes {
		if r.Fleet != fleet {
			continue
		}
		for _, rg := range r.Regions {
			if rg.Name == region {
				return rg.Ready
			}
		}
	}
	return -1
}

func drain(c chan routes.Table) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}

// regionLBs gives each region one load balancer address.
type regionLBs struct{}

func (regionLBs) RegionLBAddresses(_ context.Context, region string) ([]netip.Addr, error) {
	for i, r := range benchRegions {
		if r == region {
			return []netip.Addr{netip.AddrFrom4([4]byte{10, 216, 0, byte(i + 1)})}, nil
		}
	}
	return nil, nil
}
