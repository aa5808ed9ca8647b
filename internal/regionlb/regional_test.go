package regionlb

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/lbsync/lbsynctest"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// TestRegional configures each region's load balancer with its region's instances only, leaves
// one-region fleets to the embedded load balancer, configures again a load balancer that
// restarted empty, and gives an adopted load balancer that already runs the right configuration
// nothing (a new herd up re-syncs without touching it).
func TestRegional(t *testing.T) {
	p := lbsynctest.NewProvider(t, map[string]*lbsynctest.AdminLB{
		"eu": lbsynctest.NewAdminLB(t, "secret-eu"), "us": lbsynctest.NewAdminLB(t, "secret-us"), "solo": lbsynctest.NewAdminLB(t, "secret-solo")})
	st := memory.New()
	defer st.Close()
	listeners := []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}}
	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: listeners,
		Regions:   []v1alpha1.Region{{Name: "eu", Provider: fake.Name, Options: map[string]string{"latency": "10ms"}}, {Name: "us", Provider: fake.Name}},
	}})
	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "quick"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 9090, InstancePort: 30080}},
		Regions:   []v1alpha1.Region{{Name: "solo", Provider: fake.Name}},
	}})
	lbsynctest.Put(t, st, store.Instances, lbsynctest.RegionalInst("web-eu-1", "eu", "10.0.0.1"))
	lbsynctest.Put(t, st, store.Instances, lbsynctest.RegionalInst("web-eu-2", "eu", "10.0.0.2"))
	lbsynctest.Put(t, st, store.Instances, lbsynctest.RegionalInst("web-us-1", "us", "10.0.1.1"))
	q := lbsynctest.RegionalInst("quick-1", "solo", "10.0.2.1")
	q.Spec.Fleet = "quick"
	lbsynctest.Put(t, st, store.Instances, q)

	run := func() (*Regional, context.CancelFunc, chan struct{}) {
		r := New(Options{Networks: map[string]regionnet.Networks{fake.Name: p}, Resync: 50 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx, lbsynctest.Informer(t, st)) }()
		return r, cancel, done
	}
	r, cancel, done := run()
	lbsynctest.WaitRegion(t, p.LBs["eu"], ":8080 -> web-1:2:2; web-eu-1 web-eu-2")
	lbsynctest.WaitRegion(t, p.LBs["us"], ":8080 -> web-1:1:1; web-us-1")
	if c, puts := p.LBs["solo"].State(); puts != 0 || len(c.Listeners) != 0 {
		t.Fatalf("the one-region fleet's region got %d configs (%q): it is the embedded load balancer's", puts, lbsynctest.Describe(c))
	}
	if got := p.Ensured("eu")["latency"]; got != "10ms" {
		t.Errorf("region eu was made with latency %q, want the region's option 10ms", got)
	}
	if b := r.Balancers(); len(b) != 2 || b[0].Region != "eu" || !b[0].Synced || len(b[0].Ports) != 1 || b[0].Ports[0] != 8080 {
		t.Errorf("Balancers() = %+v, want eu and us synced on port 8080", b)
	}

	// A load balancer that restarted with no configuration gets it again within a resync.
	p.LBs["us"].Restart()
	lbsynctest.WaitRegion(t, p.LBs["us"], ":8080 -> web-1:1:1; web-us-1")

	// Health checks paused for the fleet reach the regional load balancers.
	r.SetHealthPaused(map[string]bool{"web": true})
	deadline := time.Now().Add(5 * time.Second)
	for c, _ := p.LBs["eu"].State(); len(c.Listeners) == 0 || !c.Listeners[0].HealthCheck.Paused; c, _ = p.LBs["eu"].State() {
		if time.Now().After(deadline) {
			t.Fatal("the paused health checks did not reach region eu's load balancer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.SetHealthPaused(nil)
	for c, _ := p.LBs["eu"].State(); c.Listeners[0].HealthCheck.Paused; c, _ = p.LBs["eu"].State() {
		if time.Now().After(deadline) {
			t.Fatal("the resumed health checks did not reach region eu's load balancer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done

	// A new herd up adopts load balancers that run the right configuration: it reads them and
	// changes nothing.
	_, before := p.LBs["eu"].State()
	r2, cancel2, done2 := run()
	deadline = time.Now().Add(5 * time.Second)
	for b := r2.Balancers(); len(b) != 2 || !b[0].Synced || !b[1].Synced; b = r2.Balancers() {
		if time.Now().After(deadline) {
			t.Fatalf("the new Regional did not sync: %+v", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	lbsynctest.WaitRegion(t, p.LBs["eu"], ":8080 -> web-1:2:2; web-eu-1 web-eu-2")
	if _, after := p.LBs["eu"].State(); after != before {
		t.Fatalf("region eu got %d configs after the restart, want none: it runs the right one", after-before)
	}
	cancel2()
	<-done2
}

// A fleet with allowFrom gets its listeners' allowFrom on its regions' load balancers, with every
// fleet's instances by address (in any region, served regionally or not) to tell callers by; a
// region whose fleets take any caller gets no callers, so that its configuration does not change
// with every instance.
func TestRegionalCallers(t *testing.T) {
	p := lbsynctest.NewProvider(t, map[string]*lbsynctest.AdminLB{
		"eu": lbsynctest.NewAdminLB(t, "secret-eu"), "us": lbsynctest.NewAdminLB(t, "secret-us"), "ap": lbsynctest.NewAdminLB(t, "secret-ap")})
	st := memory.New()
	defer st.Close()
	listeners := []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}}
	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: listeners, Discovery: &v1alpha1.Discovery{AllowFrom: []string{"batch"}},
		Regions: []v1alpha1.Region{{Name: "eu", Provider: fake.Name}, {Name: "us", Provider: fake.Name}},
	}})
	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "open"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 9090, InstancePort: 30080}},
		Regions:   []v1alpha1.Region{{Name: "ap", Provider: fake.Name, Options: map[string]string{"latency": "1ms"}}},
	}})
	lbsynctest.Put(t, st, store.Instances, lbsynctest.RegionalInst("web-eu-1", "eu", "10.0.0.1"))
	batch := lbsynctest.RegionalInst("batch-1", "solo", "10.0.2.1")
	batch.Spec.Fleet = "batch"
	lbsynctest.Put(t, st, store.Instances, batch)

	r := New(Options{Networks: map[string]regionnet.Networks{fake.Name: p}, Resync: 50 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, lbsynctest.Informer(t, st)) }()
	defer func() { cancel(); <-done }()
	want := map[netip.Addr]string{netip.MustParseAddr("10.0.0.1"): "web", netip.MustParseAddr("10.0.2.1"): "batch"}
	for _, region := range []string{"eu", "us"} {
		err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			c, _ := p.LBs[region].State()
			return len(c.Listeners) == 1 && slices.Equal(c.Listeners[0].AllowFrom, []string{"batch"}) && maps.Equal(c.Callers, want), nil
		})
		if err != nil {
			c, _ := p.LBs[region].State()
			t.Fatalf("region %s: listeners %+v callers %v, want allowFrom batch and callers %v", region, c.Listeners, c.Callers, want)
		}
	}
	lbsynctest.WaitRegion(t, p.LBs["ap"], ":9090 ->;")
	if c, _ := p.LBs["ap"].State(); c.Callers != nil {
		t.Errorf("region ap, whose fleet takes any caller, got callers %v", c.Callers)
	}
}
