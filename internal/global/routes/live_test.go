package routes

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// TestLive: the table follows the store through the informer, a fleet that gains spec.global and
// an instance that stops being Ready change it, and it equals what Compute makes of a listing.
func TestLive(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := memory.New()
	put := func(kind string, obj store.Object) {
		t.Helper()
		if err := store.PutObject(ctx, st, kind, obj); err != nil {
			t.Fatal(err)
		}
	}
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "hello"}, Spec: v1alpha1.FleetSpec{
		Regions: []v1alpha1.Region{{Name: "eu"}, {Name: "us"}}}}
	put(store.Fleets, f)
	var insts []*v1alpha1.Instance
	for _, name := range []string{"eu-1", "eu-2", "us-1"} {
		in := instance("hello", name[:2], v1alpha1.PhaseReady)
		in.Metadata.Name = name
		put(store.Instances, in)
		insts = append(insts, in)
	}
	lbs := fakeLB{"eu": {netip.MustParseAddr("10.216.0.1")}, "us": {netip.MustParseAddr("10.216.0.2")}}
	inf := informer.New(informer.Options{Store: st, Resync: 5 * time.Millisecond})
	live := NewLive(LiveOptions{Informer: inf, LB: lbs, Interval: time.Hour})
	go func() { _ = inf.Start(ctx) }()
	go func() { _ = live.Start(ctx) }()

	// waitFor waits until the table is what Compute makes of the store's fleets and instances.
	waitFor := func(what string, check func(Table) bool) {
		t.Helper()
		fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, st, store.Fleets)
		if err != nil {
			t.Fatal(err)
		}
		listed, _, err := store.ListObjects[v1alpha1.Instance](ctx, st, store.Instances)
		if err != nil {
			t.Fatal(err)
		}
		want := Compute(ctx, Inputs{Fleets: fleets, Instances: listed, LB: lbs})
		var got Table
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			if got, err = live.Table(ctx); err != nil {
				t.Fatal(err)
			}
			if check(got) && len(got.Routes) == len(want.Routes) && (len(got.Routes) == 0 || equalRoute(got.Routes[0], want.Routes[0])) {
				return
			}
		}
		t.Fatalf("%s: the table is %+v, want %+v", what, got, want)
	}
	waitFor("no fleet with spec.global", func(t Table) bool { return len(t.Routes) == 0 })

	f.Spec.Global = &v1alpha1.Global{Hostname: "hello.herd.test", Policy: v1alpha1.PolicyFailover, MinHealthyInstances: new(int32(2))}
	put(store.Fleets, f)
	waitFor("spec.global set", func(t Table) bool { return len(t.Routes) == 1 && t.Routes[0].Regions[0].Healthy })

	insts[1].Status.Phase = v1alpha1.PhaseUnhealthy
	put(store.Instances, insts[1])
	waitFor("eu-2 Unhealthy", func(t Table) bool { return len(t.Routes) == 1 && t.Routes[0].Regions[0].Ready == 1 })

	if err := store.Delete(ctx, st, store.Instances, "eu-1", 0); err != nil {
		t.Fatal(err)
	}
	waitFor("eu-1 deleted", func(t Table) bool { return len(t.Routes) == 1 && t.Routes[0].Regions[0].Ready == 0 })
}

func equalRoute(a, b Route) bool {
	if a.Hostname != b.Hostname || len(a.Regions) != len(b.Regions) {
		return false
	}
	for i := range a.Regions {
		if a.Regions[i].Name != b.Regions[i].Name || a.Regions[i].Ready != b.Regions[i].Ready || a.Regions[i].Healthy != b.Regions[i].Healthy || a.Regions[i].Why != b.Regions[i].Why {
			return false
		}
	}
	return true
}

// lockedReach is a Reachability the test changes while Live reads it.
type lockedReach struct {
	mu  sync.Mutex
	why map[string]string
}

func (r *lockedReach) RegionUnreachable(region string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	why, ok := r.why[region]
	return why, ok
}

// TestLiveFollowsReachability: a region that turns unreachable, which the store does not record,
// leaves the table within the interval, with nothing changed in the store.
func TestLiveFollowsReachability(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := memory.New()
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "hello"}, Spec: v1alpha1.FleetSpec{
		Regions: []v1alpha1.Region{{Name: "eu"}}, Global: &v1alpha1.Global{Hostname: "hello.herd.test"}}}
	in := instance("hello", "eu", v1alpha1.PhaseReady)
	in.Metadata.Name = "eu-1"
	for kind, obj := range map[string]store.Object{store.Fleets: f, store.Instances: in} {
		if err := store.PutObject(ctx, st, kind, obj); err != nil {
			t.Fatal(err)
		}
	}
	reach := &lockedReach{why: map[string]string{}}
	inf := informer.New(informer.Options{Store: st})
	live := NewLive(LiveOptions{Informer: inf, LB: fakeLB{"eu": {netip.MustParseAddr("10.216.0.1")}}, Reach: reach, Interval: 10 * time.Millisecond})
	go func() { _ = inf.Start(ctx) }()
	go func() { _ = live.Start(ctx) }()
	healthy := func() bool {
		tb, err := live.Table(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return len(tb.Routes) == 1 && tb.Routes[0].Regions[0].Healthy
	}
	for deadline := time.Now().Add(5 * time.Second); !healthy(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("region eu never healthy")
		}
	}
	reach.mu.Lock()
	reach.why["eu"] = "3 checks failed"
	reach.mu.Unlock()
	for deadline := time.Now().Add(5 * time.Second); healthy(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("region eu still healthy after it turned unreachable")
		}
	}
}

// TestLiveDiscoveryEmbedded: Live reads herd up's own load balancer's addresses for the regions of
// the published fleets no region's load balancer serves, and the regions' for the others.
func TestLiveDiscoveryEmbedded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := memory.New()
	for _, f := range []*v1alpha1.Fleet{
		{Metadata: v1alpha1.ObjectMeta{Name: "api"}, Spec: v1alpha1.FleetSpec{Regions: []v1alpha1.Region{{Name: "eu"}, {Name: "us"}}}},
		{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{Regions: []v1alpha1.Region{{Name: "eu"}}}},
	} {
		f.Spec.Listeners = []v1alpha1.Listener{{Port: 8081, InstancePort: 30080}}
		v1alpha1.SetFleetDefaults(f, "local")
		if err := store.PutObject(ctx, st, store.Fleets, f); err != nil {
			t.Fatal(err)
		}
	}
	inf := informer.New(informer.Options{Store: st, Resync: 5 * time.Millisecond})
	live := NewLive(LiveOptions{Informer: inf, Interval: time.Hour,
		InstanceLB: fakeLB{"eu": {netip.MustParseAddr("10.213.1.2")}, "us": {netip.MustParseAddr("10.213.2.2")}},
		EmbeddedLB: fakeLB{"eu": {netip.MustParseAddr("10.213.1.1")}},
		Regional:   func(f *v1alpha1.Fleet) bool { return len(f.Spec.Regions) > 1 }})
	go func() { _ = inf.Start(ctx) }()
	go func() { _ = live.Start(ctx) }()
	want := map[string]string{"api eu": "[10.213.1.2]", "api us": "[10.213.2.2]", "web eu": "[10.213.1.1]"}
	got := map[string]string{}
	err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		tab, err := live.Table(ctx)
		if err != nil {
			return false, err
		}
		clear(got)
		for _, r := range tab.Discovery {
			for _, rg := range r.Regions {
				got[r.Hostname+" "+rg.Name] = fmt.Sprint(rg.Addresses)
			}
		}
		return maps.Equal(got, want), nil
	})
	if err != nil {
		t.Errorf("discovery addresses %v, want %v: %v", got, want, err)
	}
}
