package routes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/informer"
)

// DefaultInterval is how often Live reads again the inputs that are not in the store (the load
// balancers' addresses, reachability, round-trip times): a region that turns unreachable leaves
// the table within this plus the health checkers' own detection time (1.5 to 2.5 s), inside the
// 3 s herd promises.
const DefaultInterval = 250 * time.Millisecond

// LiveOptions configure a Live table.
type LiveOptions struct {
	Informer *informer.Informer
	LB       LBAddresses
	Reach    Reachability
	RTT      RTTSource
	// InstanceLB gives the addresses the instances reach each region's load balancer on, for
	// the discovery routes. Default: LB.
	InstanceLB LBAddresses
	// Regional and EmbeddedLB tell the fleets no region's load balancer serves and where the
	// instances reach herd up's own load balancer instead (Inputs.Regional, Inputs.EmbeddedLB).
	Regional   func(*v1alpha1.Fleet) bool
	EmbeddedLB LBAddresses
	// DiscoveryZone is the zone of the discovery names, copied into every table.
	DiscoveryZone string
	// DiscoveryHTTPPort is the port the discovery names are called on alone, copied into every
	// table. 0: none.
	DiscoveryHTTPPort int
	// Interval: see DefaultInterval (the default).
	Interval time.Duration
	// OnChange, when set, is called with every new table, from Start's goroutine; the table must
	// not be changed.
	OnChange func(Table)
}

// Live keeps the table current from the shared informer: the fleets with spec.global and, kept up
// to date change by change, the count of Ready instances per fleet and region. A change of either
// recomputes the table at once; the other inputs are read again every Interval. Neither walks the
// instances: the cost of keeping routes current grows with the global fleets' regions, not with
// their instances.
type Live struct {
	opts LiveOptions

	mu        sync.Mutex
	global    map[string]*v1alpha1.Fleet // the fleets with spec.global
	published map[string]*v1alpha1.Fleet // the fleets with spec.discovery on
	ready     map[FleetRegion]int32
	callers   map[netip.Addr]FleetRegion // the instances by address

	kick  chan struct{}
	first chan struct{}
	table *Table // the latest table, set by Start, under mu
	// outside is what the latest table was computed from of the inputs the store does not hold;
	// only Start's goroutine uses it.
	outside outside
}

// outside is a reading of the inputs that are not in the store, for the regions of the global
// fleets: a tick that finds them as they were has nothing to recompute.
type outside struct {
	addrs       map[string][]netip.Addr
	addrErrs    map[string]string
	unreachable map[string]string
	rtt         map[netip.Prefix]map[string]time.Duration
	// inside are the addresses the instances reach the regions' load balancers on, for the
	// published fleets' regions, and embedded those they reach herd up's own on, for the regions
	// of the published fleets served by it.
	inside, embedded insideAddrs
}

type insideAddrs struct {
	addrs map[string][]netip.Addr
	errs  map[string]string
}

func (o insideAddrs) RegionLBAddresses(_ context.Context, region string) ([]netip.Addr, error) {
	if why, ok := o.errs[region]; ok {
		return nil, errors.New(why)
	}
	return o.addrs[region], nil
}

func (o outside) RegionLBAddresses(_ context.Context, region string) ([]netip.Addr, error) {
	if why, ok := o.addrErrs[region]; ok {
		return nil, errors.New(why)
	}
	return o.addrs[region], nil
}

func (o outside) RegionUnreachable(region string) (string, bool) {
	why, ok := o.unreachable[region]
	return why, ok
}

func (o outside) ClientRTTs() map[netip.Prefix]map[string]time.Duration { return o.rtt }

// readOutside reads the inputs that are not in the store for regions, and the addresses inside
// the published fleets' regions: published of the regions' load balancers, embedded of herd up's.
func (l *Live) readOutside(ctx context.Context, regions, published, embedded map[string]bool) outside {
	o := outside{addrs: map[string][]netip.Addr{}, addrErrs: map[string]string{}, unreachable: map[string]string{}}
	inside := l.opts.InstanceLB
	if inside == nil {
		inside = l.opts.LB
	}
	o.inside = readInside(ctx, inside, published)
	o.embedded = readInside(ctx, l.opts.EmbeddedLB, embedded)
	for r := range regions {
		if l.opts.LB != nil {
			if a, err := l.opts.LB.RegionLBAddresses(ctx, r); err != nil {
				o.addrErrs[r] = err.Error()
			} else {
				o.addrs[r] = a
			}
		}
		if l.opts.Reach != nil {
			if why, unreachable := l.opts.Reach.RegionUnreachable(r); unreachable {
				o.unreachable[r] = why
			}
		}
	}
	if l.opts.RTT != nil {
		o.rtt = l.opts.RTT.ClientRTTs()
	}
	return o
}

// readInside reads lb's addresses of regions.
func readInside(ctx context.Context, lb LBAddresses, regions map[string]bool) insideAddrs {
	o := insideAddrs{addrs: map[string][]netip.Addr{}, errs: map[string]string{}}
	if lb == nil {
		return o
	}
	for r := range regions {
		if a, err := lb.RegionLBAddresses(ctx, r); err != nil {
			o.errs[r] = err.Error()
		} else {
			o.addrs[r] = a
		}
	}
	return o
}

// NewLive returns a Live table on opts.Informer; Start keeps it current.
func NewLive(opts LiveOptions) *Live {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	l := &Live{opts: opts, global: map[string]*v1alpha1.Fleet{}, published: map[string]*v1alpha1.Fleet{},
		ready: map[FleetRegion]int32{}, callers: map[netip.Addr]FleetRegion{},
		kick: make(chan struct{}, 1), first: make(chan struct{})}
	opts.Informer.AddHandler(informer.Handler{Fleet: l.fleetChanged, Instance: l.instanceChanged})
	return l
}

func (l *Live) fleetChanged(old, new *v1alpha1.Fleet) {
	if old == new {
		return // a resync: nothing changed
	}
	l.mu.Lock()
	switch {
	case new != nil && new.Spec.Global != nil:
		l.global[new.Metadata.Name] = new
	case old != nil:
		delete(l.global, old.Metadata.Name)
	}
	switch {
	case new != nil && new.Published(): // stored fleets are defaulted at apply
		l.published[new.Metadata.Name] = new
	case old != nil:
		delete(l.published, old.Metadata.Name)
	}
	l.mu.Unlock()
	if (old != nil && (old.Spec.Global != nil || old.Published())) || (new != nil && (new.Spec.Global != nil || new.Published())) {
		l.wake()
	}
}

func (l *Live) instanceChanged(old, new *v1alpha1.Instance) {
	callersChanged := l.callerChanged(old, new)
	was, is := readyIn(old), readyIn(new)
	if was == is {
		if callersChanged {
			l.wake()
		}
		return
	}
	l.mu.Lock()
	if was != (FleetRegion{}) {
		if l.ready[was]--; l.ready[was] <= 0 {
			delete(l.ready, was)
		}
	}
	if is != (FleetRegion{}) {
		l.ready[is]++
	}
	_, wasGlobal := l.global[was.Fleet]
	_, isGlobal := l.global[is.Fleet]
	_, wasPublished := l.published[was.Fleet]
	_, isPublished := l.published[is.Fleet]
	l.mu.Unlock()
	if wasGlobal || isGlobal || wasPublished || isPublished || callersChanged {
		l.wake()
	}
}

// callerChanged keeps the instances' addresses, and reports whether they changed while a fleet
// is published (the only time they are read).
func (l *Live) callerChanged(old, new *v1alpha1.Instance) bool {
	oldAddr, hadAddr := callerAddr(old)
	newAddr, hasAddr := callerAddr(new)
	var next FleetRegion
	if hasAddr {
		next = FleetRegion{new.Spec.Fleet, new.Spec.Region}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := false
	if hadAddr && (!hasAddr || oldAddr != newAddr) && l.callers[oldAddr] == (FleetRegion{old.Spec.Fleet, old.Spec.Region}) {
		delete(l.callers, oldAddr)
		changed = true
	}
	if hasAddr && l.callers[newAddr] != next {
		l.callers[newAddr] = next
		changed = true
	}
	return changed && len(l.published) > 0
}

// readyIn is the fleet and region an instance counts as Ready in, or none.
func readyIn(in *v1alpha1.Instance) FleetRegion {
	if in == nil || in.Status.Phase != v1alpha1.PhaseReady {
		return FleetRegion{}
	}
	return FleetRegion{in.Spec.Fleet, in.Spec.Region}
}

func (l *Live) wake() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// Table returns the current table, waiting for the first one.
func (l *Live) Table(ctx context.Context) (Table, error) {
	select {
	case <-l.first:
	case <-ctx.Done():
		return Table{}, fmt.Errorf("waiting for the first routes: %w", ctx.Err())
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return *l.table, nil
}

// Start keeps the table current until ctx ends, once the informer has synced. It returns nil then.
func (l *Live) Start(ctx context.Context) error {
	if err := l.opts.Informer.WaitForSync(ctx); err != nil {
		return nil // stopped before the first listing
	}
	t := time.NewTicker(l.opts.Interval)
	defer t.Stop()
	for changed := true; ; {
		l.recompute(ctx, changed)
		select {
		case <-ctx.Done():
			return nil
		case <-l.kick:
			changed = true
		case <-t.C:
			changed = false
		}
	}
}

// recompute builds the table when the store's fleets or instances changed, or when the inputs
// that are not in the store read differently; a table equal to the last one is dropped, so that
// the last one (and its slices, which reflect.DeepEqual compares by address first) stays.
func (l *Live) recompute(ctx context.Context, changed bool) {
	l.mu.Lock()
	in := Inputs{Fleets: make([]*v1alpha1.Fleet, 0, len(l.global)), Ready: map[FleetRegion]int32{}}
	regions, inside, embedded := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, f := range l.published {
		in.Published = append(in.Published, f)
		served := inside
		if l.opts.Regional != nil && l.opts.EmbeddedLB != nil && !l.opts.Regional(f) {
			served = embedded
		}
		for _, r := range f.Spec.Regions {
			served[r.Name] = true
			if n := l.ready[FleetRegion{f.Metadata.Name, r.Name}]; n > 0 {
				in.Ready[FleetRegion{f.Metadata.Name, r.Name}] = n
			}
		}
	}
	if len(l.published) > 0 {
		in.Callers = maps.Clone(l.callers)
	}
	for _, f := range l.global {
		in.Fleets = append(in.Fleets, f)
		for _, r := range failoverOrder(f) {
			regions[r] = true
			if n := l.ready[FleetRegion{f.Metadata.Name, r}]; n > 0 {
				in.Ready[FleetRegion{f.Metadata.Name, r}] = n
			}
		}
	}
	l.mu.Unlock()
	o := l.readOutside(ctx, regions, inside, embedded)
	if !changed && l.table != nil && reflect.DeepEqual(o, l.outside) {
		return
	}
	l.outside = o
	in.LB, in.Reach, in.RTT, in.InstanceLB = o, o, o, o.inside
	if l.opts.Regional != nil && l.opts.EmbeddedLB != nil {
		in.Regional, in.EmbeddedLB = l.opts.Regional, o.embedded
	}
	next := Compute(ctx, in)
	if len(next.Discovery) > 0 {
		next.DiscoveryZone, next.DiscoveryHTTPPort = l.opts.DiscoveryZone, l.opts.DiscoveryHTTPPort
	}
	l.mu.Lock()
	first := l.table == nil
	differs := first || !reflect.DeepEqual(*l.table, next)
	if differs {
		l.table = &next
	}
	l.mu.Unlock()
	if first {
		close(l.first)
	}
	if differs && l.opts.OnChange != nil {
		l.opts.OnChange(next)
	}
}
