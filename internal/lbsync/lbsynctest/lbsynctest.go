// Package lbsynctest has what the tests of the load balancers' configuration (lbsync's, the regional
// load balancers', the front door's) share: a load balancer's admin API as the real one answers
// it, a fake provider that runs one per region, and the store writes and waits around them.
package lbsynctest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
)

// AdminLB is a load balancer's admin API as the real one answers it (parsing and defaulting
// configs with the lb package), counting the configs it is given.
type AdminLB struct {
	Srv *httptest.Server

	mu     sync.Mutex
	cfg    lb.Config
	puts   int
	stats  lb.Snapshot       // what GET /stats answers
	health []lb.TargetHealth // what GET /health answers
}

// NewAdminLB serves an AdminLB that accepts token until the test ends.
func NewAdminLB(t *testing.T, token string) *AdminLB {
	a := &AdminLB{}
	a.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
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
		if r.URL.Path == "/health" {
			_ = json.NewEncoder(w).Encode(a.health)
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
	t.Cleanup(a.Srv.Close)
	return a
}

// State returns the config it runs and how many it was given.
func (a *AdminLB) State() (lb.Config, int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cfg, a.puts
}

// Restart empties it, as a load balancer that restarted.
func (a *AdminLB) Restart() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cfg = lb.Config{}
}

// SetStats sets what GET /stats answers.
func (a *AdminLB) SetStats(s lb.Snapshot) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stats = s
}

// SetHealth sets what GET /health answers.
func (a *AdminLB) SetHealth(h ...lb.TargetHealth) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.health = h
}

// Provider is a fake provider whose regions' networks (regionnet.Networks) run a load balancer
// (an AdminLB) each.
type Provider struct {
	*fake.Provider
	Dir string
	LBs map[string]*AdminLB

	mu      sync.Mutex
	ensured map[string]map[string]string // region -> options last asked for
}

// NewProvider returns a Provider running lbs, by region.
func NewProvider(t *testing.T, lbs map[string]*AdminLB) *Provider {
	fp, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return &Provider{Provider: fp, Dir: t.TempDir(), LBs: lbs, ensured: map[string]map[string]string{}}
}

var _ regionnet.Networks = (*Provider)(nil)

// EnsureRegion implements regionnet.Networks: region's AdminLB, its data address 10.216.0.1.
func (p *Provider) EnsureRegion(ctx context.Context, region string, options map[string]string) (regionnet.Region, error) {
	p.mu.Lock()
	p.ensured[region] = options
	p.mu.Unlock()
	tok := filepath.Join(p.Dir, region+"-token")
	if err := os.WriteFile(tok, []byte("secret-"+region+"\n"), 0o600); err != nil {
		return regionnet.Region{}, err
	}
	return regionnet.Region{Region: region, DataAddress: netip.MustParseAddr("10.216.0.1"), AdminURL: p.LBs[region].Srv.URL, TokenFile: tok}, nil
}

// errNoNetwork is what the fake says to what regionlb does not use of regionnet.Networks.
var errNoNetwork = errors.New("lbsynctest: the fake's regions have no network of their own")

// DataAddress implements regionnet.Networks: none, the regions have no network.
func (p *Provider) DataAddress(context.Context, string) (netip.Addr, bool) {
	return netip.Addr{}, false
}

// EnsureFrontDoor implements regionnet.Networks: the fake runs no front door.
func (p *Provider) EnsureFrontDoor(context.Context) (regionnet.FrontDoor, error) {
	return regionnet.FrontDoor{}, errNoNetwork
}

// RemoveFrontDoor implements regionnet.Networks: there is none to remove.
func (p *Provider) RemoveFrontDoor(context.Context) error { return nil }

// DialFromClients implements regionnet.Networks: there are no clients' side.
func (p *Provider) DialFromClients(context.Context, string, string) (net.Conn, error) {
	return nil, errNoNetwork
}

// Partition implements regionnet.Chaos: there is no link to cut.
func (p *Provider) Partition(context.Context, string) error { return errNoNetwork }

// Degrade implements regionnet.Chaos: there is no link to degrade.
func (p *Provider) Degrade(context.Context, string, time.Duration, float64) error {
	return errNoNetwork
}

// Restore implements regionnet.Chaos: there is no link to restore.
func (p *Provider) Restore(context.Context, string) error { return errNoNetwork }

// Ensured returns the options region's load balancer was last made with.
func (p *Provider) Ensured(region string) map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ensured[region]
}

// Informer is a cache of st's fleets and instances, filled until the test ends: what the load
// balancers' configurers follow.
func Informer(t *testing.T, st store.Store) *informer.Informer {
	inf := informer.New(informer.Options{Store: st})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = inf.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return inf
}

// Put writes obj (created when it has no resource version) and sets its new version.
func Put(t *testing.T, st store.Store, kind string, obj store.Object) {
	t.Helper()
	if err := store.PutObject(context.Background(), st, kind, obj); err != nil {
		t.Fatal(err)
	}
}

// Inst is an instance of fleet web at revision rev.
func Inst(name, rev string, phase v1alpha1.InstancePhase, addr string) *v1alpha1.Instance {
	return &v1alpha1.Instance{
		Metadata: v1alpha1.ObjectMeta{Name: name},
		Spec:     v1alpha1.InstanceSpec{Fleet: "web", Revision: rev},
		Status:   v1alpha1.InstanceStatus{Phase: phase, Address: addr},
	}
}

// RegionalInst is a Ready instance of fleet web's revision web-1 in region.
func RegionalInst(name, region, addr string) *v1alpha1.Instance {
	in := Inst(name, "web-1", v1alpha1.PhaseReady, addr)
	in.Spec.Region = region
	return in
}

// Describe sums a config up as listener -> group:weight:targets.
func Describe(c lb.Config) string {
	out := ""
	for _, l := range c.Listeners {
		out += l.Address + " ->"
		for _, g := range l.Groups {
			out += fmt.Sprintf(" %s:%d:%d", g.Name, g.Weight, len(g.Targets))
		}
		out += ";"
	}
	return out
}

// WaitDescribed waits until got returns want.
func WaitDescribed(t *testing.T, want string, got func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		g := got()
		if g == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("load balancer config %q, want %q", g, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitRegion waits until a runs want: Describe's summary, then its targets' IDs.
func WaitRegion(t *testing.T, a *AdminLB, want string) {
	t.Helper()
	WaitDescribed(t, want, func() string {
		c, _ := a.State()
		got := Describe(c)
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

// Observed is a load balancer's health and counters as the test sets them (lbmonitor.Observed).
type Observed struct {
	TargetHealth []lb.TargetHealth
	Snapshot     lb.Snapshot
}

// Health returns o.TargetHealth.
func (o *Observed) Health() []lb.TargetHealth { return o.TargetHealth }

// Metrics returns o.Snapshot.
func (o *Observed) Metrics() lb.Snapshot { return o.Snapshot }

// Stats are counters of ok 2xx and bad 5xx requests, all in the first latency bucket.
func Stats(ok, bad uint64) lb.Stats {
	var s lb.Stats
	s.Requests[lb.Class2xx] = ok
	s.Requests[lb.Class5xx] = bad
	s.Latency = make([]uint64, len(lb.LatencyBuckets)+1)
	s.Latency[0] = ok + bad
	return s
}
