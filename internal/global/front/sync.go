package front

import (
	"bytes"
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
	"sync/atomic"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/fleetwatch"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/regionlb"
	"herd.dev/herd/internal/regionnet"
)

// SyncOptions configure a Sync.
type SyncOptions struct {
	// Networks are the networks of the providers whose regions are networks, by provider name;
	// the first, by name (regionnet.First), runs the front door. With none, Sync does nothing.
	Networks map[string]regionnet.Networks
	// Regions returns the regional load balancers and their data addresses: *regionlb.Regional's
	// Balancers. Required.
	Regions func() []regionlb.Status
	// Resync is how often the front door's configuration is read back and compared. Default:
	// regionlb.DefaultResync.
	Resync time.Duration
	Logger *slog.Logger
}

// Sync keeps the global front door in step with the store, as regionlb.Regional keeps the regional
// load balancers: for every listener of every fleet served regionally (regionlb.ServedRegionally) it gives the
// front door a listener on the same port whose regions are the fleet's regions' own load balancers
// (Config). It is level-based: the configuration is derived whole from the store and the
// regional load balancers Regional reached, read back every Resync and sent only when the front
// door runs another one, so a front door adopted from an earlier herd up is not touched and one
// that restarted empty is configured again. It starts the front door only once a fleet needs it.
// Only the replica that runs the controller runs it.
type Sync struct {
	opts SyncOptions
	log  *slog.Logger
	prov regionnet.Networks // nil: no provider's regions are networks
	kick chan struct{}
	// regionsKnown is set by the first Kick: until Regional has passed over every region once, it
	// knows only some regions' addresses, and a front door adopted by a new herd up would be given
	// a configuration with regions missing.
	regionsKnown atomic.Bool
	// passes counts the configurations derived (apply's runs past regionsKnown), so that a test
	// can tell that resyncs happened before it checks that something did not.
	passes atomic.Int64

	mu        sync.Mutex
	door      regionnet.FrontDoor
	admin     *lb.AdminClient // nil until the front door was ensured
	applied   []byte          // the JSON of the config last applied or found, nil until one was
	listeners []ListenerStatus
	err       error
	// removed is true once no front door runs because none is needed (remove succeeded).
	removed bool
}

// ListenerStatus is one listener of the front door.
type ListenerStatus struct {
	// Name is "<fleet>/<listener>", as on the regional load balancers.
	Name  string
	Fleet string
	// Port is where the front door serves it, on its DataAddress: the fleet listener's port.
	Port int
	// Regions are the regions behind it, in the fleet's order.
	Regions []string
}

// Status is the front door as Sync last saw it.
type Status struct {
	// DataAddress is where clients reach its listeners; invalid until it was started.
	DataAddress netip.Addr
	Listeners   []ListenerStatus
	// Synced is true when it runs the configuration derived from the store; Error says why not.
	Synced bool
	Error  string
}

// NewSync returns a Sync; Run it.
func NewSync(opts SyncOptions) *Sync {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Resync <= 0 {
		opts.Resync = regionlb.DefaultResync
	}
	f := &Sync{opts: opts, log: opts.Logger.With("component", "front-sync"), kick: make(chan struct{}, 1)}
	f.prov = regionnet.First(opts.Networks)
	return f
}

// Kick asks for a sync soon: the regional load balancers changed (regionlb.Options.Applied).
// Sync configures nothing before the first Kick.
func (f *Sync) Kick() {
	f.regionsKnown.Store(true)
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Run configures the front door from the fleets of inf, the control plane's cache, until ctx
// ends. It keeps its last configuration when it ends (and while the store cannot answer).
func (f *Sync) Run(ctx context.Context, inf *informer.Informer) error {
	if f.prov == nil {
		<-ctx.Done()
		return nil
	}
	tick := make(chan time.Time)
	go func() {
		t := time.NewTicker(f.opts.Resync)
		defer t.Stop()
		for {
			var now time.Time
			select {
			case <-ctx.Done():
				return
			case now = <-t.C:
			case <-f.kick:
				now = time.Now()
			}
			select {
			case tick <- now:
			case <-ctx.Done():
				return
			}
		}
	}()
	fleetwatch.Run(ctx, inf, tick, func(v *fleetwatch.View, dirty map[string]bool) { f.apply(ctx, v, len(dirty) == 0) })
	return nil
}

// Status returns the front door as last seen.
func (f *Sync) Status() Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := Status{DataAddress: f.door.DataAddress, Listeners: slices.Clone(f.listeners), Synced: f.err == nil && f.applied != nil}
	if f.err != nil {
		s.Error = f.err.Error()
	}
	return s
}

// RegionHealth is the front door's own view of the regions behind its listeners, read from it now:
// each region's state by its active and passive checks, and the round trip its checks measure
// (lb.TargetHealth, one per listener and region: the target's ID is the region). Nil while no
// front door runs.
func (f *Sync) RegionHealth() ([]lb.TargetHealth, error) {
	f.mu.Lock()
	admin := f.admin
	f.mu.Unlock()
	if admin == nil {
		return nil, nil
	}
	return admin.TargetHealth()
}

// Listeners derives the front door's listeners from the fleets (served regionally only) and the
// regional load balancers' data addresses by region; a region whose load balancer has no address
// yet is left out, and a listener without any region too.
func Listeners(fleets []*v1alpha1.Fleet, lbs map[string]netip.Addr) ([]Listener, []ListenerStatus) {
	sort.Slice(fleets, func(i, j int) bool { return fleets[i].Metadata.Name < fleets[j].Metadata.Name })
	var cfg []Listener
	var out []ListenerStatus
	for _, fl := range fleets {
		if !regionlb.ServedRegionally(fl) {
			continue
		}
		hc := fl.Spec.HealthCheck
		checkPort := hc.Port
		if checkPort == 0 && len(fl.Spec.Listeners) > 0 {
			checkPort = fl.Spec.Listeners[0].InstancePort
		}
		for _, l := range fl.Spec.Listeners {
			port := strconv.Itoa(int(l.Port))
			fln := Listener{Name: fl.Metadata.Name + "/" + l.Name, Fleet: fl.Metadata.Name, Address: ":" + port, Protocol: lb.ProtocolHTTP}
			if l.Protocol == v1alpha1.ProtocolTCP {
				fln.Protocol = lb.ProtocolTCP
			} else if l.InstancePort == checkPort {
				// Checked through the regional load balancer, which answers 503 without a healthy
				// instance. Another listener's path may not exist on its port: a TCP connect.
				fln.HealthPath = hc.Path
			}
			st := ListenerStatus{Name: fln.Name, Fleet: fln.Fleet, Port: int(l.Port)}
			for _, r := range fl.Spec.Regions {
				if a, ok := lbs[r.Name]; ok && a.IsValid() {
					fln.Regions = append(fln.Regions, Region{Name: r.Name, Address: net.JoinHostPort(a.String(), port)})
					st.Regions = append(st.Regions, r.Name)
				}
			}
			if len(fln.Regions) > 0 {
				cfg = append(cfg, fln)
				out = append(out, st)
			}
		}
	}
	return cfg, out
}

// apply derives the front door's configuration and gives it to the front door when it runs
// another one; readBack says to compare with what it runs even if the configuration did not change.
func (f *Sync) apply(ctx context.Context, v *fleetwatch.View, readBack bool) {
	if !f.regionsKnown.Load() {
		return
	}
	defer f.passes.Add(1)
	fleets := v.Fleets()
	lbs := map[string]netip.Addr{}
	for _, b := range f.opts.Regions() {
		lbs[b.Region] = b.DataAddress
	}
	listeners, status := Listeners(fleets, lbs)
	cfg := Config(listeners...)
	want, err := json.Marshal(cfg.WithDefaults())
	if err != nil {
		f.setErr(err)
		return
	}
	f.mu.Lock()
	admin, applied, failed := f.admin, f.applied, f.err != nil
	f.mu.Unlock()
	if len(listeners) == 0 {
		// No fleet needs a front door: none is started, and one that runs (the last fleet
		// served regionally is gone, or an earlier herd up left it) is removed, with the
		// network it held.
		f.remove(ctx, admin != nil)
		return
	}
	f.mu.Lock()
	f.removed = false
	f.mu.Unlock()
	if !readBack && !failed && bytes.Equal(applied, want) {
		return
	}
	if admin == nil || failed {
		if admin, err = f.ensure(ctx); err != nil {
			f.setErr(err)
			return
		}
	}
	running, err := admin.Config()
	if err != nil {
		f.setErr(fmt.Errorf("read the front door's configuration: %w", err))
		return
	}
	if have, err := json.Marshal(running.WithDefaults()); err == nil && bytes.Equal(have, want) {
		f.setApplied(want, status)
		return
	}
	if err := admin.Apply(cfg); err != nil {
		f.setErr(fmt.Errorf("configure the front door: %w", err))
		f.log.Error("the front door refused its configuration", "err", err)
		return
	}
	f.setApplied(want, status)
	f.log.Info("front door configured", "listeners", len(listeners), "address", f.Status().DataAddress)
}

// remove stops the front door once after the last fleet that needed it went (and once at start,
// for one an earlier herd up left): running says one was ensured by this Sync.
func (f *Sync) remove(ctx context.Context, running bool) {
	f.mu.Lock()
	done := f.removed
	f.mu.Unlock()
	if done && !running {
		return
	}
	if err := f.prov.RemoveFrontDoor(ctx); err != nil {
		f.setErr(fmt.Errorf("remove the front door: %w", err))
		return
	}
	if running {
		f.log.Info("front door removed: no fleet is served regionally")
	}
	f.mu.Lock()
	f.door, f.admin, f.applied, f.listeners, f.err, f.removed = regionnet.FrontDoor{}, nil, nil, nil, nil, true
	f.mu.Unlock()
}

// ensure starts or adopts the front door and reads its token.
func (f *Sync) ensure(ctx context.Context) (*lb.AdminClient, error) {
	door, err := f.prov.EnsureFrontDoor(ctx)
	if err != nil {
		return nil, err
	}
	token, err := os.ReadFile(door.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("read the front door's admin token: %w", err)
	}
	admin := &lb.AdminClient{URL: door.AdminURL, Token: strings.TrimSpace(string(token)), HTTP: door.HTTP}
	f.mu.Lock()
	f.door, f.admin = door, admin
	f.mu.Unlock()
	return admin, nil
}

func (f *Sync) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *Sync) setApplied(cfg []byte, listeners []ListenerStatus) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.applied, f.listeners, f.err = cfg, listeners, nil
}
