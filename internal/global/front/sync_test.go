package front

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbsync/lbsynctest"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/regionlb"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// frontProvider is an lbsynctest.Provider whose regions' load balancers have addresses of their own
// and which runs a front door (an lbsynctest.AdminLB).
type frontProvider struct {
	*lbsynctest.Provider
	front   *lbsynctest.AdminLB
	ensures atomic.Int32
	removes atomic.Int32
}

var regionAddr = map[string]string{"eu": "10.216.0.1", "us": "10.216.0.2", "solo": "10.216.0.3"}

func (p *frontProvider) EnsureRegion(ctx context.Context, region string, options map[string]string) (regionnet.Region, error) {
	b, err := p.Provider.EnsureRegion(ctx, region, options)
	b.DataAddress = netip.MustParseAddr(regionAddr[region])
	return b, err
}

func (p *frontProvider) EnsureFrontDoor(ctx context.Context) (regionnet.FrontDoor, error) {
	p.ensures.Add(1)
	tok := filepath.Join(p.Dir, "front-token")
	if err := os.WriteFile(tok, []byte("secret-front\n"), 0o600); err != nil {
		return regionnet.FrontDoor{}, err
	}
	return regionnet.FrontDoor{DataAddress: netip.MustParseAddr("10.216.0.9"), AdminURL: p.front.Srv.URL, TokenFile: tok}, nil
}

func (p *frontProvider) RemoveFrontDoor(ctx context.Context) error {
	p.removes.Add(1)
	return nil
}

// describeFront writes a front door's config as "addr protocol path [region=address ...] policy;".
func describeFront(c lb.Config) string {
	var out []string
	for _, l := range c.Listeners {
		s := l.Address + " " + string(l.Protocol) + " " + l.HealthCheck.Path + " ["
		for _, g := range l.Groups {
			for _, tg := range g.Targets {
				s += " " + g.Name + "=" + tg.Address
			}
		}
		out = append(out, s+" ] "+string(l.GroupPolicy))
	}
	return strings.Join(out, "; ")
}

// TestFront gives the front door one listener per listener of each fleet served regionally, with
// the fleet's regions' load balancers behind it; configures it again after it restarted empty;
// leaves an adopted front door that runs the right configuration alone; empties it when the last
// such fleet goes; and starts none while no fleet needs one.
func TestFront(t *testing.T) {
	p := &frontProvider{front: lbsynctest.NewAdminLB(t, "secret-front"), Provider: lbsynctest.NewProvider(t, map[string]*lbsynctest.AdminLB{
		"eu": lbsynctest.NewAdminLB(t, "secret-eu"), "us": lbsynctest.NewAdminLB(t, "secret-us"), "solo": lbsynctest.NewAdminLB(t, "secret-solo")})}
	st := memory.New()
	defer st.Close()
	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "quick"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 9090, InstancePort: 30080}},
		Regions:   []v1alpha1.Region{{Name: "solo", Provider: fake.Name}},
	}})

	run := func() (*Sync, context.CancelFunc, chan struct{}) {
		networks := map[string]regionnet.Networks{fake.Name: p}
		f := NewSync(SyncOptions{Networks: networks, Resync: 50 * time.Millisecond})
		r := regionlb.New(regionlb.Options{Networks: networks, Resync: time.Hour, Applied: f.Kick})
		f.opts.Regions = r.Balancers
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		inf := lbsynctest.Informer(t, st)
		go func() { _ = r.Run(ctx, inf) }()
		go func() { defer close(done); _ = f.Run(ctx, inf) }()
		return f, cancel, done
	}
	// waitPasses waits until f has derived its configuration n more times: what must not happen
	// has had its chances.
	waitPasses := func(f *Sync, n int64) {
		t.Helper()
		want := f.passes.Load() + n
		deadline := time.Now().Add(10 * time.Second)
		for f.passes.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("the front door's configuration was derived %d times in 10 s, want %d", f.passes.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	f, cancel, done := run()
	// The one-region fleet is herd up's: no front door is started for it.
	waitPasses(f, 4)
	if n := p.ensures.Load(); n != 0 {
		t.Fatalf("the front door was ensured %d times with no fleet served regionally", n)
	}

	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{
			{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP},
			{Name: "admin", Port: 8081, InstancePort: 30081, Protocol: v1alpha1.ProtocolHTTP},
			{Name: "db", Port: 5432, InstancePort: 30432, Protocol: v1alpha1.ProtocolTCP},
		},
		HealthCheck: v1alpha1.HealthCheck{Path: "/healthz", Port: 30080},
		Regions:     []v1alpha1.Region{{Name: "us", Provider: fake.Name}, {Name: "eu", Provider: fake.Name}},
	}})
	want := ":8080 http /healthz [ us=10.216.0.2:8080 eu=10.216.0.1:8080 ] nearest; " +
		":8081 http  [ us=10.216.0.2:8081 eu=10.216.0.1:8081 ] nearest; " +
		":5432 tcp  [ us=10.216.0.2:5432 eu=10.216.0.1:5432 ] nearest"
	waitFront := func(want string) {
		t.Helper()
		lbsynctest.WaitDescribed(t, want, func() string { c, _ := p.front.State(); return describeFront(c) })
	}
	waitFront(want)
	deadline := time.Now().Add(5 * time.Second)
	for s := f.Status(); !s.Synced || len(s.Listeners) != 3 || s.Listeners[0].Name != "web/http" || s.Listeners[0].Port != 8080 ||
		strings.Join(s.Listeners[0].Regions, ",") != "us,eu" || s.DataAddress.String() != "10.216.0.9"; s = f.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("Status: %+v, want synced, at 10.216.0.9, web/http on 8080 with regions us and eu first of 3", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The real front door's settings (front.Config): checks every 500 ms, retries on the next region.
	if c, _ := p.front.State(); c.Listeners[0].Retry.Budget != 1 || !c.Listeners[0].HealthCheck.CloseOnUnhealthy {
		t.Errorf("the front door's listener is not front.Config's: %+v", c.Listeners[0])
	}

	// A front door that restarted with no configuration gets it again within a resync.
	p.front.Restart()
	waitFront(want)
	cancel()
	<-done

	// A new herd up adopts the front door that runs the right configuration: it changes nothing.
	_, before := p.front.State()
	f2, cancel2, done2 := run()
	deadline = time.Now().Add(5 * time.Second)
	for s := f2.Status(); !s.Synced; s = f2.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("the new Sync did not sync: %+v", s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if _, after := p.front.State(); after != before {
		t.Errorf("the adopted front door got %d configs, want none: it runs the right one", after-before)
	}

	// The fleet goes: the front door, needed by no fleet now, is removed.
	removesBefore := p.removes.Load()
	if err := store.Delete(context.Background(), st, store.Fleets, "web", 0); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for s := f2.Status(); p.removes.Load() == removesBefore || s.DataAddress.IsValid() || len(s.Listeners) != 0; s = f2.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("the front door was not removed after the last fleet served regionally went: %d removals, status %+v", p.removes.Load()-removesBefore, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Removed once: later resyncs with no fleet leave it be.
	removed := p.removes.Load()
	waitPasses(f2, 4)
	if n := p.removes.Load() - removed; n != 0 {
		t.Errorf("the front door was removed %d more times with nothing to remove", n)
	}
	cancel2()
	<-done2
}
