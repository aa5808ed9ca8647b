// Package regionlb configures each region's own load balancer: for every region where a fleet
// served regionally runs, it has the region's provider make the load balancer and gives it, over
// its admin API, the fleets' listeners with the region's instances as targets. It also keeps a
// monitor of each (the fleets' figures, lbmonitor.Figures) and hands their client round trips to
// the RTT collector (global/rtt).
package regionlb

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/fleetwatch"
	"herd.dev/herd/internal/global/rtt"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbmonitor"
	"herd.dev/herd/internal/lbsync"
	"herd.dev/herd/internal/localca"
	"herd.dev/herd/internal/regionnet"
)

// DefaultResync is how often Regional checks that each regional load balancer runs the
// configuration the store gives it, besides every change: a load balancer that restarted (and so
// lost its configuration) is configured again within it.
const DefaultResync = 5 * time.Second

// ServedRegionally reports whether a fleet is served by its regions' own load balancers (where
// the regions' providers' regions are networks, regionnet.Networks): a fleet in more than one region,
// or in a region given provider options (a network of its own, e.g. `latency: 40ms`). A fleet in
// one region without options, the quick start's, is served by herd up's embedded load balancer
// only. herd up's embedded load balancer serves every fleet in any case: it is the control
// plane's own view of the instances' health, over a path that no region's partition cuts.
func ServedRegionally(f *v1alpha1.Fleet) bool {
	if len(f.Spec.Regions) > 1 {
		return true
	}
	return slices.ContainsFunc(f.Spec.Regions, func(r v1alpha1.Region) bool { return len(r.Options) > 0 })
}

// Options configure a Regional.
type Options struct {
	// Networks are the networks of the providers whose regions are networks, by provider name:
	// they run the regional load balancers.
	Networks map[string]regionnet.Networks
	// Resync is how often every regional load balancer's configuration is checked. Default:
	// DefaultResync.
	Resync time.Duration
	// Applied, if set, is called after every pass over the regions: what Balancers returns may
	// have changed (Front's Kick).
	Applied func()
	// LocalCA issues the certificates of listeners with tls.localCA.
	LocalCA *localca.CA
	// Discovery, with a port, gives each regional load balancer a host router for the
	// discovery names of the fleets it serves, on the address the region's instances reach it
	// on (lbsync.Discovery). Default: none.
	Discovery lbsync.Discovery
	Logger    *slog.Logger
}

// Regional keeps the load balancer of every region in step with the store: for each region
// where a fleet served regionally (ServedRegionally) runs, it makes the region's load balancer
// (regionnet.Networks.EnsureRegion) and gives it, over its admin API, the listeners of those fleets
// with the region's instances only as targets. Like lbsync's Follow it is level-based: each
// configuration is derived whole from the records, never patched, so a load balancer found in
// any state (adopted from an earlier herd up, restarted empty) ends up with the right one. Only
// the replica that runs the controller runs it.
type Regional struct {
	opts Options
	log  *slog.Logger
	// listeners builds the listeners (bound on every address of the region's load balancer)
	// and holds the fleets whose health checks are paused.
	listeners *lbsync.Sync

	mu  sync.Mutex
	lbs map[string]*regionLB // by region
	// served holds the regions of each fleet whose load balancers it configures.
	served map[string][]string
	// routersErr says, by region, why its load balancer has no host router for the discovery
	// names ("" when it has one, or needs none).
	routersErr map[string]string
}

// regionLB is what Regional knows of one region's load balancer.
type regionLB struct {
	info    regionnet.Region
	admin   *lb.AdminClient
	applied []byte // the JSON of the config last applied, nil until one was
	ports   []int
	err     error // why the last ensure or apply failed
	// mon counts its traffic, read over the admin API (Figures).
	mon *lbmonitor.Remote
}

// Status is a regional load balancer as Regional last saw it.
type Status struct {
	Region string
	// DataAddress is where the region's clients reach its listeners.
	DataAddress netip.Addr
	// Ports are its listeners' ports (every listener binds all the load balancer's addresses).
	Ports []int
	// Synced is true when it runs the configuration the store gives it.
	Synced bool
	// Error says why it is not synced.
	Error string
}

// New returns a Regional; Run it.
func New(opts Options) *Regional {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Resync <= 0 {
		opts.Resync = DefaultResync
	}
	log := opts.Logger.With("component", "regional-lb")
	listeners := lbsync.New(nil, "", log)
	if opts.LocalCA != nil {
		listeners.UseLocalCA(opts.LocalCA)
	}
	return &Regional{opts: opts, log: log, listeners: listeners, lbs: map[string]*regionLB{}}
}

// Run configures the regional load balancers from the fleets and instances of inf, the control
// plane's cache, until ctx ends. They keep their last
// configuration when it ends (and while the store cannot answer).
func (r *Regional) Run(ctx context.Context, inf *informer.Informer) error {
	tick := time.NewTicker(r.opts.Resync)
	defer tick.Stop()
	fleetwatch.Run(ctx, inf, tick.C, func(v *fleetwatch.View, _ map[string]bool) { r.apply(ctx, v) })
	return nil
}

// SetHealthPaused pauses the health checks of the fleets in paused on every regional load
// balancer, and resumes the others', from the next sync on (at most Resync later).
func (r *Regional) SetHealthPaused(paused map[string]bool) { r.listeners.SetHealthPaused(paused) }

// Balancers returns the regional load balancers, by region name.
func (r *Regional) Balancers() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.lbs))
	for region, rl := range r.lbs {
		s := Status{Region: region, DataAddress: rl.info.DataAddress, Ports: slices.Clone(rl.ports), Synced: rl.err == nil && rl.applied != nil}
		if rl.err != nil {
			s.Error = rl.err.Error()
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out
}

// regionWant is what a region's load balancer should run.
type regionWant struct {
	prov    regionnet.Networks
	options map[string]string
	cfg     lb.Config
	routes  []lb.HostRoute // the discovery names of its fleets
}

// apply derives every region's configuration from f and gives it to the region's load balancer
// when it runs another one.
func (r *Regional) apply(ctx context.Context, v *fleetwatch.View) {
	want := map[string]*regionWant{}
	served := map[string][]string{}
	for _, name := range v.Names() {
		fl, insts, weights, _ := v.Fleet(name)
		if !ServedRegionally(fl) {
			continue
		}
		for _, reg := range fl.Spec.Regions {
			prov, ok := r.opts.Networks[reg.Provider]
			if !ok {
				continue
			}
			var here []*v1alpha1.Instance
			for _, in := range insts {
				if in.Spec.Region == reg.Name {
					here = append(here, in)
				}
			}
			w := want[reg.Name]
			if w == nil {
				w = &regionWant{prov: prov, options: reg.Options}
				want[reg.Name] = w
			}
			ls := r.listeners.Listeners(fl, here, regionWeights(fl, reg.Name, weights))
			w.cfg.Listeners = append(w.cfg.Listeners, ls...)
			if r.opts.Discovery.Port != 0 {
				w.routes = append(w.routes, lbsync.DiscoveryRoutes(r.opts.Discovery.Zone, []*v1alpha1.Fleet{fl}, [][]lb.Listener{ls})...)
			}
			served[name] = append(served[name], reg.Name)
		}
	}
	r.mu.Lock()
	r.served = served
	r.mu.Unlock()
	regions := make([]string, 0, len(want))
	for region, w := range want {
		regions = append(regions, region)
		// Instances of every region call through this one when theirs has no Ready instance of
		// the fleet they call.
		w.cfg.Callers = lbsync.Callers(w.cfg.Listeners, v.Instances)
		r.addRouter(region, w)
	}
	sort.Strings(regions)
	for _, region := range regions {
		r.sync(ctx, region, want[region])
	}
	// A region no fleet served regionally runs in any more keeps its load balancer until the
	// provider removes the region's network, but serves nothing.
	r.mu.Lock()
	var gone []string
	for region := range r.lbs {
		if want[region] == nil {
			gone = append(gone, region)
		}
	}
	r.mu.Unlock()
	for _, region := range gone {
		r.sync(ctx, region, &regionWant{})
		r.mu.Lock()
		delete(r.lbs, region)
		r.mu.Unlock()
	}
	if r.opts.Applied != nil {
		r.opts.Applied()
	}
}

// sync makes sure the region's load balancer runs, then gives it w.cfg unless it runs it.
func (r *Regional) sync(ctx context.Context, region string, w *regionWant) {
	r.mu.Lock()
	rl := r.lbs[region]
	if rl == nil {
		rl = &regionLB{}
		r.lbs[region] = rl
	}
	r.mu.Unlock()
	want, err := json.Marshal(w.cfg.WithDefaults())
	if err != nil {
		r.setErr(rl, err)
		return
	}
	ports := listenerPorts(w.cfg)
	if w.prov == nil && rl.admin == nil {
		return // nothing to empty: Regional never reached it
	}
	if rl.admin == nil || (rl.err != nil && w.prov != nil) {
		if err := r.ensure(ctx, region, rl, w); err != nil {
			r.setErr(rl, err)
			return
		}
	}
	running, err := rl.admin.Config()
	if err != nil {
		// Unreachable or restarting: make sure it runs at the next sync (the provider restarts
		// a load balancer that died), then configure it.
		r.setErr(rl, fmt.Errorf("read the configuration of the load balancer of region %s: %w", region, err))
		return
	}
	if have, err := json.Marshal(running.WithDefaults()); err == nil && string(have) == string(want) {
		r.setApplied(rl, want, ports)
		return
	}
	start := time.Now()
	if err := rl.admin.Apply(w.cfg); err != nil {
		r.setErr(rl, fmt.Errorf("configure the load balancer of region %s: %w", region, err))
		r.log.Error("regional load balancer refused its configuration", "region", region, "err", err)
		return
	}
	r.setApplied(rl, want, ports)
	r.log.Info("regional load balancer configured", "region", region, "listeners", len(w.cfg.Listeners), "took", time.Since(start).String())
}

// ensure starts or adopts the region's load balancer and reads its token.
func (r *Regional) ensure(ctx context.Context, region string, rl *regionLB, w *regionWant) error {
	info, err := w.prov.EnsureRegion(ctx, region, w.options)
	if err != nil {
		return err
	}
	token, err := os.ReadFile(info.TokenFile)
	if err != nil {
		return fmt.Errorf("read the admin token of the load balancer of region %s: %w", region, err)
	}
	r.mu.Lock()
	rl.info = info
	rl.admin = &lb.AdminClient{URL: info.AdminURL, Token: strings.TrimSpace(string(token))}
	rl.mon = lbmonitor.NewRemote(*rl.admin)
	r.mu.Unlock()
	return nil
}

// regionWeights are the weights a region's own load balancer gives a fleet's revisions: the
// region's part of a wave while it runs there (a canary at 10% in the region is 10% of the
// region's traffic), else the fleet's (fleetWeights).
func regionWeights(f *v1alpha1.Fleet, region string, fleetWeights map[string]int32) map[string]int32 {
	if f.Status.Rollout.InProgress() {
		for _, rs := range f.Status.Regions {
			if rs.Name == region && rs.Rollout.InProgress() && rs.Rollout.Weights != nil {
				return rs.Rollout.Weights
			}
		}
	}
	return fleetWeights
}

func (r *Regional) setErr(rl *regionLB, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rl.err = err
}

func (r *Regional) setApplied(rl *regionLB, cfg []byte, ports []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	rl.applied, rl.ports, rl.err = cfg, ports, nil
}

// listenerPorts returns the ports of cfg's listeners, in order.
func listenerPorts(cfg lb.Config) []int {
	var out []int
	for _, l := range cfg.Listeners {
		if _, p, err := net.SplitHostPort(l.Address); err == nil {
			if n, err := strconv.Atoi(p); err == nil && !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// Monitors returns the monitors of the regional load balancers serving fleet, by region, or nil
// when the fleet is not served regionally (lbmonitor.Regional). A region whose load balancer is
// not reached yet, or whose last read failed, is missing: its figures are unknown, not zero.
func (r *Regional) Monitors(fleet string) map[string]*lbmonitor.Monitor {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	regions, ok := r.served[fleet]
	if !ok {
		return nil
	}
	out := make(map[string]*lbmonitor.Monitor, len(regions))
	for _, region := range regions {
		if rl := r.lbs[region]; rl != nil && rl.mon != nil && rl.mon.OK() {
			out[region] = rl.mon.Monitor
		}
	}
	return out
}

// ServingMonitor implements lbmonitor.Regional: the region's load balancer sends the region's
// instances of f their traffic when f is served regionally and the region's provider runs
// regional load balancers.
func (r *Regional) ServingMonitor(f *v1alpha1.Fleet, region string) (m *lbmonitor.Monitor, regional bool) {
	if r == nil || !ServedRegionally(f) {
		return nil, false
	}
	i := slices.IndexFunc(f.Spec.Regions, func(reg v1alpha1.Region) bool { return reg.Name == region })
	if i < 0 {
		return nil, false
	}
	if _, ok := r.opts.Networks[f.Spec.Regions[i].Provider]; !ok {
		return nil, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rl := r.lbs[region]; rl != nil && rl.mon != nil && rl.mon.OK() {
		return rl.mon.Monitor, true
	}
	return nil, true
}

// RTTSources returns the load balancers Regional configures, by region: the sources of an
// rtt.Collector. A region whose load balancer Regional has not reached yet is not among them.
func (r *Regional) RTTSources() map[string]rtt.Source {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]rtt.Source{}
	for region, rl := range r.lbs {
		if rl.admin != nil {
			out[region] = rl.admin
		}
	}
	return out
}
