package lbsync

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// adminLB is a regional load balancer's admin API as the real one answers it (parsing and
// defaulting configs with the lb package), counting the configs it is given.
type adminLB struct {
	srv *httptest.Server

	mu    sync.Mutex
	cfg   lb.Config
	puts  int
	stats lb.Snapshot // what GET /stats answers
}

func newAdminLB(t *testing.T, token string) *adminLB {
	a := &adminLB{}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if r.URL.Path == "/stats" {
			_ = json.NewEncoder(w).Encode(a.stats)
			return
		}
		if r.Method == http.MethodPut {
			data, _ := io.ReadAll(r.Body)
			cfg, err := lb.ParseConfig(data)
			if err != nil {
				http.Error(w, `{"error":"bad config"}`, http.StatusBadRequest)
				return
			}
			a.cfg = cfg.WithDefaults()
			a.puts++
		}
		_ = json.NewEncoder(w).Encode(a.cfg.WithDefaults())
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *adminLB) state() (lb.Config, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg, a.puts
}

// restart empties it, as a load balancer that restarted.
func (a *adminLB) restart() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cfg = lb.Config{}
}

// regionalProvider is a fake provider that runs a load balancer (an adminLB) per region.
type regionalProvider struct {
	*fake.Provider
	dir string
	lbs map[string]*adminLB

	mu      sync.Mutex
	ensured map[string]map[string]string // region -> options last asked for
}

func (p *regionalProvider) EnsureRegionBalancer(ctx context.Context, region string, options map[string]string) (provider.RegionBalancer, error) {
	p.mu.Lock()
	p.ensured[region] = options
	p.mu.Unlock()
	tok := filepath.Join(p.dir, region+"-token")
	if err := os.WriteFile(tok, []byte("secret-"+region+"\n"), 0o600); err != nil {
		return provider.RegionBalancer{}, err
	}
	return provider.RegionBalancer{Region: region, DataAddress: netip.MustParseAddr("10.216.0.1"), AdminURL: p.lbs[region].srv.URL, TokenFile: tok}, nil
}

func regionalInst(name, region, addr string) *v1alpha1.Instance {
	in := inst(name, "web-1", v1alpha1.PhaseReady, addr)
	in.Spec.Region = region
	return in
}

func waitRegion(t *testing.T, a *adminLB, want string) {
	t.Helper()
	waitDescribed(t, want, func() string {
		c, _ := a.state()
		got := describe(c)
		for _, l := range c.Listeners {
			for _, g := range l.Groups {
				for _, tg := range g.Targets {
					got += " " + tg.ID
				}
			}
		}
		return got
	})
}

// TestRegional configures each region's load balancer with its region's instances only, leaves
// one-region fleets to the embedded load balancer, configures again a load balancer that
// restarted empty, and gives an adopted load balancer that already runs the right configuration
// nothing (a new herd up re-syncs without touching it).
func TestRegional(t *testing.T) {
	fp, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := &regionalProvider{Provider: fp, dir: t.TempDir(), ensured: map[string]map[string]string{},
		lbs: map[string]*adminLB{"eu": newAdminLB(t, "secret-eu"), "us": newAdminLB(t, "secret-us"), "solo": newAdminLB(t, "secret-solo")}}
	st := memory.New()
	defer st.Close()
	listeners := []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}}
	put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: listeners,
		Regions:   []v1alpha1.Region{{Name: "eu", Provider: fake.Name, Options: map[string]string{"latency": "10ms"}}, {Name: "us", Provider: fake.Name}},
	}})
	put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "quick"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 9090, InstancePort: 30080}},
		Regions:   []v1alpha1.Region{{Name: "solo", Provider: fake.Name}},
	}})
	put(t, st, store.Instances, regionalInst("web-eu-1", "eu", "10.0.0.1"))
	put(t, st, store.Instances, regionalInst("web-eu-2", "eu", "10.0.0.2"))
	put(t, st, store.Instances, regionalInst("web-us-1", "us", "10.0.1.1"))
	q := regionalInst("quick-1", "solo", "10.0.2.1")
	q.Spec.Fleet = "quick"
	put(t, st, store.Instances, q)

	run := func() (*Regional, context.CancelFunc, chan struct{}) {
		r := NewRegional(RegionalOptions{Providers: map[string]provider.Provider{fake.Name: p}, Resync: 50 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(ctx, st) }()
		return r, cancel, done
	}
	r, cancel, done := run()
	waitRegion(t, p.lbs["eu"], ":8080 -> web-1:2:2; web-eu-1 web-eu-2")
	waitRegion(t, p.lbs["us"], ":8080 -> web-1:1:1; web-us-1")
	if c, puts := p.lbs["solo"].state(); puts != 0 || len(c.Listeners) != 0 {
		t.Fatalf("the one-region fleet's region got %d configs (%q): it is the embedded load balancer's", puts, describe(c))
	}
	p.mu.Lock()
	if got := p.ensured["eu"]["latency"]; got != "10ms" {
		t.Errorf("region eu was made with latency %q, want the region's option 10ms", got)
	}
	p.mu.Unlock()
	if b := r.Balancers(); len(b) != 2 || b[0].Region != "eu" || !b[0].Synced || len(b[0].Ports) != 1 || b[0].Ports[0] != 8080 {
		t.Errorf("Balancers() = %+v, want eu and us synced on port 8080", b)
	}

	// A load balancer that restarted with no configuration gets it again within a resync.
	p.lbs["us"].restart()
	waitRegion(t, p.lbs["us"], ":8080 -> web-1:1:1; web-us-1")

	// Health checks paused for the fleet reach the regional load balancers.
	r.SetHealthPaused(map[string]bool{"web": true})
	deadline := time.Now().Add(5 * time.Second)
	for c, _ := p.lbs["eu"].state(); len(c.Listeners) == 0 || !c.Listeners[0].HealthCheck.Paused; c, _ = p.lbs["eu"].state() {
		if time.Now().After(deadline) {
			t.Fatal("the paused health checks did not reach region eu's load balancer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.SetHealthPaused(nil)
	for c, _ := p.lbs["eu"].state(); c.Listeners[0].HealthCheck.Paused; c, _ = p.lbs["eu"].state() {
		if time.Now().After(deadline) {
			t.Fatal("the resumed health checks did not reach region eu's load balancer")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done

	// A new herd up adopts load balancers that run the right configuration: it reads them and
	// changes nothing.
	_, before := p.lbs["eu"].state()
	r2, cancel2, done2 := run()
	deadline = time.Now().Add(5 * time.Second)
	for b := r2.Balancers(); len(b) != 2 || !b[0].Synced || !b[1].Synced; b = r2.Balancers() {
		if time.Now().After(deadline) {
			t.Fatalf("the new Regional did not sync: %+v", b)
		}
		time.Sleep(5 * time.Millisecond)
	}
	waitRegion(t, p.lbs["eu"], ":8080 -> web-1:2:2; web-eu-1 web-eu-2")
	if _, after := p.lbs["eu"].state(); after != before {
		t.Fatalf("region eu got %d configs after the restart, want none: it runs the right one", after-before)
	}
	cancel2()
	<-done2
}
