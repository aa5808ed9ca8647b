package regionlb

import (
	"context"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbmonitor"
	"herd.dev/herd/internal/lbsync/lbsynctest"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// waitLoad polls load until it answers with more than zero requests per second or fails.
func waitLoad(t *testing.T, what string, load func() (autoscaler.Load, bool)) autoscaler.Load {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, ok := load()
		if ok && l.RequestsPerSecond > 0 {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no load after 5s (last %+v, %v)", what, l, ok)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// twoRegions is a provider running a load balancer in regions eu and us, and a store holding fleet
// web (returned) served in both, with an instance in each: web-eu-1 and web-us-1.
func twoRegions(t *testing.T) (*lbsynctest.Provider, store.Store, *v1alpha1.Fleet) {
	p := lbsynctest.NewProvider(t, map[string]*lbsynctest.AdminLB{"eu": lbsynctest.NewAdminLB(t, "secret-eu"), "us": lbsynctest.NewAdminLB(t, "secret-us")})
	st := memory.New()
	t.Cleanup(func() { st.Close() })
	web := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}},
		Regions:   []v1alpha1.Region{{Name: "eu", Provider: fake.Name}, {Name: "us", Provider: fake.Name}},
	}}
	lbsynctest.Put(t, st, store.Fleets, web)
	lbsynctest.Put(t, st, store.Instances, lbsynctest.RegionalInst("web-eu-1", "eu", "10.0.0.1"))
	lbsynctest.Put(t, st, store.Instances, lbsynctest.RegionalInst("web-us-1", "us", "10.0.1.1"))
	return p, st, web
}

// runRegional runs r on st until the test ends, once both regions' load balancers have fleet
// web's instance of their region as their target.
func runRegional(t *testing.T, r *Regional, st store.Store, p *lbsynctest.Provider) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, lbsynctest.Informer(t, st)) }()
	t.Cleanup(func() { cancel(); <-done })
	lbsynctest.WaitRegion(t, p.LBs["eu"], ":8080 -> web-1:1:1; web-eu-1")
	lbsynctest.WaitRegion(t, p.LBs["us"], ":8080 -> web-1:1:1; web-us-1")
}

// TestFigures counts a fleet served regionally on its regions' own load balancers, over their
// admin API, each region apart, and any other fleet on the embedded load balancer; a region
// whose load balancer does not answer has no figures rather than zero ones.
func TestFigures(t *testing.T) {
	p, st, _ := twoRegions(t)
	r := New(Options{Networks: map[string]regionnet.Networks{fake.Name: p}, Resync: 50 * time.Millisecond})
	runRegional(t, r, st, p)

	regional := func(n uint64) lb.Snapshot {
		return lb.Snapshot{Fleets: []lb.FleetStats{{Fleet: "web", Stats: lbsynctest.Stats(n, n/10), Groups: []lb.GroupStats{{Group: "web-1", Stats: lbsynctest.Stats(n, n/10)}}}}}
	}
	p.LBs["eu"].SetStats(regional(1000))
	p.LBs["us"].SetStats(regional(1000))
	embedded := &lbsynctest.Observed{Snapshot: lb.Snapshot{Fleets: []lb.FleetStats{{Fleet: "quick", Stats: lbsynctest.Stats(10, 0), Groups: []lb.GroupStats{{Group: "quick-1", Stats: lbsynctest.Stats(10, 0)}}}}}}
	f := lbmonitor.Figures{Embedded: lbmonitor.New(embedded, lbmonitor.Options{}), Regional: r}

	since := time.Now()
	if rs, ok := f.RegionRevisionStats("web", "eu", "web-1", since); !ok || rs.Requests != 0 {
		t.Fatalf("first RegionRevisionStats(eu) = %+v, %v; want a zero baseline", rs, ok)
	}
	f.RevisionStats("web", "web-1", since)
	f.RegionLoad("web", "eu", time.Second)
	f.RegionLoad("web", "us", time.Second)
	// Region eu takes 550 more requests, 50 of them 5xx; region us none.
	p.LBs["eu"].SetStats(regional(1500))
	eu := waitLoad(t, "RegionLoad(eu)", func() (autoscaler.Load, bool) { return f.RegionLoad("web", "eu", time.Second) })
	if us, ok := f.RegionLoad("web", "us", time.Second); !ok || us.RequestsPerSecond != 0 {
		t.Errorf("RegionLoad(us) = %+v, %v; want 0 rps: its load balancer counted nothing more", us, ok)
	}
	if all, ok := f.FleetLoad("web", time.Second); !ok || all.RequestsPerSecond < eu.RequestsPerSecond {
		t.Errorf("FleetLoad(web) = %+v, %v; want at least region eu's %v rps", all, ok, eu.RequestsPerSecond)
	}
	if rs, ok := f.RegionRevisionStats("web", "eu", "web-1", since); !ok || rs.Requests != 550 || rs.Errors5xx != 50 {
		t.Errorf("RegionRevisionStats(eu) = %+v, %v; want 550 requests, 50 5xx", rs, ok)
	}
	if rs, ok := f.RegionRevisionStats("web", "us", "web-1", since); !ok || rs.Requests != 0 {
		t.Errorf("RegionRevisionStats(us) = %+v, %v; want 0 requests", rs, ok)
	}
	if rs, ok := f.RevisionStats("web", "web-1", since); !ok || rs.Requests != 550 {
		t.Errorf("RevisionStats(web) = %+v, %v; want both regions' 550 requests", rs, ok)
	}

	// A fleet not served regionally is the embedded load balancer's.
	if _, ok := f.RevisionStats("quick", "quick-1", since); !ok {
		t.Error("RevisionStats(quick) did not come from the embedded load balancer")
	}
	if _, ok := f.RegionLoad("quick", "solo", time.Second); ok {
		t.Error("RegionLoad(quick) answered from an embedded Monitor that cannot tell regions apart")
	}

	// Region us's load balancer stops answering: its figures are unknown.
	p.LBs["us"].Srv.Close()
	f.RegionLoad("web", "us", time.Second) // the failed read
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, ok := f.RegionLoad("web", "us", time.Second); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("RegionLoad(us) still answers 5s after its load balancer stopped")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// An instance of a fleet served regionally serves when its region's load balancer, the one that
// sends it traffic, finds it healthy, whatever herd up's embedded one says, and serves no one
// before that load balancer is reached; an instance of any other fleet is the embedded load
// balancer's to judge.
func TestServingHealth(t *testing.T) {
	p, st, web := twoRegions(t)
	quick := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "quick"}, Spec: v1alpha1.FleetSpec{
		Listeners: web.Spec.Listeners, Regions: []v1alpha1.Region{{Name: "local", Provider: fake.Name}},
	}}
	eu, us := lbsynctest.RegionalInst("web-eu-1", "eu", "10.0.0.1"), lbsynctest.RegionalInst("web-us-1", "us", "10.0.1.1")
	solo := lbsynctest.RegionalInst("quick-1", "local", "10.0.2.1")
	embedded := &lbsynctest.Observed{TargetHealth: []lb.TargetHealth{
		{ID: "web-eu-1", State: lb.StateHealthy}, {ID: "web-us-1", State: lb.StateHealthy}, {ID: "quick-1", State: lb.StateHealthy},
	}}
	r := New(Options{Networks: map[string]regionnet.Networks{fake.Name: p}, Resync: 50 * time.Millisecond})
	f := lbmonitor.Figures{Embedded: lbmonitor.New(embedded, lbmonitor.Options{}), Regional: r}
	check := func(fl *v1alpha1.Fleet, in *v1alpha1.Instance, want string) {
		t.Helper()
		if got, notified := f.ServingHealth(fl, in); got != want || notified {
			t.Errorf("ServingHealth(%s) = %q, notified %v; want %q, not notified", in.Metadata.Name, got, notified, want)
		}
	}

	check(web, eu, "") // region eu's load balancer is not reached yet
	check(quick, solo, controller.HealthHealthy)

	p.LBs["eu"].SetHealth(lb.TargetHealth{ID: "web-eu-1", State: lb.StateHealthy})
	p.LBs["us"].SetHealth(lb.TargetHealth{ID: "web-us-1", State: lb.StateUnhealthy})
	runRegional(t, r, st, p)
	check(web, eu, controller.HealthHealthy)
	check(web, us, controller.HealthUnhealthy)
}

// A regional load balancer gives a fleet's revisions the region's own weights while the wave
// runs there, not the blend of every region's.
func TestRegionWeights(t *testing.T) {
	blend := map[string]int32{"old": 95, "new": 5}
	f := &v1alpha1.Fleet{Status: v1alpha1.FleetStatus{
		Rollout: &v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutProgressing, Weights: blend},
		Regions: []v1alpha1.RegionStatus{
			{Name: "eu", Rollout: &v1alpha1.RolloutStatus{Phase: v1alpha1.RolloutProgressing, Weights: map[string]int32{"old": 90, "new": 10}}},
			{Name: "us", Rollout: &v1alpha1.RolloutStatus{Phase: "Waiting"}},
		},
	}}
	if w := regionWeights(f, "eu", blend); w["new"] != 10 {
		t.Errorf("region eu's weights %v, want its own 10%% canary", w)
	}
	if w := regionWeights(f, "us", blend); w["new"] != 5 {
		t.Errorf("region us's weights %v, want the fleet's while the wave is not there", w)
	}
}
