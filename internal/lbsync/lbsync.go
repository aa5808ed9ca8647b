// Package lbsync keeps the load balancer's configuration in step with the fleets: every listener of
// a fleet becomes a listener of the load balancer, every revision a target group, every instance
// with an address a target. It is the controller's TargetSink; the controller tells it what each
// fleet has, and it applies the whole configuration to the load balancer atomically. On a herd up
// replica that does not lead, Follow derives the same configuration from the store instead.
package lbsync

import (
	"fmt"
	"iter"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/localca"
)

var _ controller.TargetSink = (*Sync)(nil)

// Balancer is what lbsync needs of the load balancer.
type Balancer interface {
	Apply(lb.Config) error
	Health() []lb.TargetHealth
}

// Sync translates fleets into the load balancer's config.
type Sync struct {
	lb Balancer
	// bindHost is the address listeners bind on, e.g. 127.0.0.1.
	bindHost string
	log      *slog.Logger

	pausedMu sync.Mutex
	paused   map[string]bool // fleets whose health checks are paused

	mu     sync.Mutex
	fleets map[string][]lb.Listener
	// refused holds, per fleet, why the load balancer refused its latest listeners.
	refused map[string]error
	localCA *localca.CA // issues the certificates of listeners with tls.localCA

	// callers are each fleet's instances by address, which the listeners with allowFrom tell a
	// request's fleet by (lb.Config.Callers).
	callers map[string]map[netip.Addr]string

	// discovery configures the host router of the discovery names (discovery.go); routes are
	// each published fleet's route, and routersErr why the router was last left out.
	discovery  Discovery
	routes     map[string]lb.HostRoute
	routersErr string

	regionsMu sync.Mutex
	regionOf  map[string]string   // instance -> region
	instances map[string][]string // fleet -> its instances in regionOf
}

// New returns a Sync applying to b, with listeners bound on bindHost.
func New(b Balancer, bindHost string, log *slog.Logger) *Sync {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sync{lb: b, bindHost: bindHost, log: log.With("component", "lbsync"), fleets: map[string][]lb.Listener{}, refused: map[string]error{},
		callers: map[string]map[netip.Addr]string{}, routes: map[string]lb.HostRoute{}}
}

// routable reports whether an instance should be a target: it has an address and is not on its way
// out. Booting instances are targets too; the load balancer's health checks decide when they get
// traffic, so a new instance serves as soon as it answers.
func routable(in *v1alpha1.Instance) bool {
	if controller.IsWarm(in) {
		return false // the warm pool is out of rotation until a scale-out takes it
	}
	switch in.Status.Phase {
	case v1alpha1.PhaseBooting, v1alpha1.PhaseReady, v1alpha1.PhaseUnhealthy:
		return in.Status.Address != ""
	}
	return false
}

// Listeners builds the load balancer listeners of one fleet. Without weights each revision gets a
// share proportional to its targets, so every instance carries an equal share during a rolling
// update; with weights (a blue/green or canary rollout) each revision gets its percent, and a
// revision the map does not name gets none.
func (s *Sync) Listeners(f *v1alpha1.Fleet, instances []*v1alpha1.Instance, weights map[string]int32) []lb.Listener {
	byRev := map[string][]*v1alpha1.Instance{}
	for _, in := range instances {
		if routable(in) {
			byRev[in.Spec.Revision] = append(byRev[in.Spec.Revision], in)
		}
	}
	revs := make([]string, 0, len(byRev))
	for r := range byRev {
		revs = append(revs, r)
	}
	sort.Strings(revs)
	hc := f.Spec.HealthCheck
	var out []lb.Listener
	for _, l := range f.Spec.Listeners {
		ln := lb.Listener{
			Name:     f.Metadata.Name + "/" + l.Name,
			Fleet:    f.Metadata.Name,
			Address:  net.JoinHostPort(s.bindHost, strconv.Itoa(int(l.Port))),
			Protocol: lb.Protocol(l.Protocol),
			HealthCheck: lb.HealthCheck{
				Path: hc.Path, Port: int(hc.Port),
				HealthyThreshold: int(hc.HealthyThreshold), UnhealthyThreshold: int(hc.UnhealthyThreshold),
			},
			// A fleet with no serving instance (scaled to zero, first instance booting) holds requests
			// until one serves; the held count reaches the autoscaler, which scales from zero at once.
			Hold: &lb.Hold{},
		}
		if l.TLS != nil {
			t, err := s.listenerTLS(f, l)
			if err != nil {
				s.log.Warn("listener left out: no certificate", "fleet", f.Metadata.Name, "listener", l.Name, "error", err)
				continue
			}
			ln.TLS = t
		}
		if hc.Interval != nil {
			ln.HealthCheck.Interval = lb.Duration(hc.Interval.Duration)
		}
		if hc.Timeout != nil {
			ln.HealthCheck.Timeout = lb.Duration(hc.Timeout.Duration)
		}
		ln.HealthCheck.Paused = s.healthPaused(f.Metadata.Name)
		if l.Protocol == v1alpha1.ProtocolHTTP {
			ln.Tenancy = lbTenancy(f.Spec.Tenancy)
		}
		if d := f.Spec.Discovery; d != nil {
			// The load balancer refuses the instances of the fleets allowFrom leaves out, which it
			// tells by their addresses (lb.Config.Callers, Callers).
			ln.AllowFrom = d.AllowFrom
		}
		for _, rev := range revs {
			g := lb.TargetGroup{Name: rev, Weight: len(byRev[rev])}
			switch {
			case f.Spec.Tenancy != nil:
				// Each tenant's revisions share its requests by its own instances (lb/tenancy.go):
				// the fleet-wide weight is unused, and a count of thousands is no valid weight.
				g.Weight = 1
			case weights != nil:
				g.Weight = int(weights[rev])
			}
			for _, in := range byRev[rev] {
				g.Targets = append(g.Targets, lb.Target{
					ID:      in.Metadata.Name,
					Address: net.JoinHostPort(in.Status.Address, strconv.Itoa(int(l.InstancePort))),
					Tenant:  in.Metadata.Labels[v1alpha1.LabelTenant],
				})
			}
			ln.Groups = append(ln.Groups, g)
		}
		out = append(out, ln)
	}
	return out
}

// lbTenancy is a fleet's spec.tenancy as the load balancer routes by it; nil without one.
func lbTenancy(t *v1alpha1.Tenancy) *lb.Tenancy {
	if t == nil {
		return nil
	}
	key, err := v1alpha1.ParseTenancyKey(t.Key)
	if err != nil {
		return nil // refused at apply
	}
	// The API's key kinds are the load balancer's: header, host, pathPrefix.
	lt := &lb.Tenancy{Key: lb.TenantKey(key.Kind), Header: key.Header, Tenants: t.Tenants, Open: t.Open,
		RequestsPerSecond: float64(t.RequestsPerSecond)}
	if t.MaxInFlight != nil {
		lt.MaxInFlight = int(*t.MaxInFlight)
	}
	if t.MaxWait != nil {
		lt.MaxWait = lb.Duration(t.MaxWait.Duration)
	}
	return lt
}

// SetHealthPaused pauses the health checks of the fleets in paused and resumes those of every
// other fleet (lb.HealthCheck.Paused: targets keep their state), applying at once to the fleets
// the load balancer serves.
func (s *Sync) SetHealthPaused(paused map[string]bool) {
	s.pausedMu.Lock()
	s.paused = maps.Clone(paused)
	s.pausedMu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := false
	for name, ls := range s.fleets {
		for i := range ls {
			if ls[i].HealthCheck.Paused != paused[name] {
				ls[i].HealthCheck.Paused = paused[name]
				changed = true
			}
		}
	}
	if !changed {
		return
	}
	if err := s.applyLocked(); err != nil {
		s.log.Error("pause or resume health checks", "err", err)
	}
}

func (s *Sync) healthPaused(fleet string) bool {
	s.pausedMu.Lock()
	defer s.pausedMu.Unlock()
	return s.paused[fleet]
}

// SetFleetTargets implements controller.TargetSink.
func (s *Sync) SetFleetTargets(f *v1alpha1.Fleet, instances []*v1alpha1.Instance, weights map[string]int32) {
	s.setRegions(f.Metadata.Name, instances)
	ls := s.Listeners(f, instances, weights)
	addrs := callerAddrs(slices.Values(instances))
	s.mu.Lock()
	defer s.mu.Unlock()
	callersChanged := !maps.Equal(s.callers[f.Metadata.Name], addrs)
	if callersChanged {
		s.callers[f.Metadata.Name] = addrs
	}
	routeChanged := s.setRouteLocked(f, ls)
	if !routeChanged && reflect.DeepEqual(s.fleets[f.Metadata.Name], ls) && !(callersChanged && s.limitsCallersLocked()) {
		return
	}
	prev, had := s.fleets[f.Metadata.Name]
	s.fleets[f.Metadata.Name] = ls
	if err := s.applyLocked(); err != nil {
		// Keep the last config that worked: the load balancer still serves it.
		if had {
			s.fleets[f.Metadata.Name] = prev
		} else {
			delete(s.fleets, f.Metadata.Name)
		}
		s.refused[f.Metadata.Name] = err
		s.log.Error("load balancer refused the fleet's listeners", "fleet", f.Metadata.Name, "err", err)
		return
	}
	delete(s.refused, f.Metadata.Name)
}

// ListenerError returns why the load balancer refused the fleet's latest listeners (an address in
// use on the host, a port it may not bind), or nil when it serves them. What can be known before
// (a port another fleet claims) is refused at apply; this is what only the load balancer finds.
// The load balancer keeps serving the fleet's last listeners that it accepted, if any.
func (s *Sync) ListenerError(fleet string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refused[fleet]
}

// RemoveFleet implements controller.TargetSink.
func (s *Sync) RemoveFleet(name string) {
	s.setRegions(name, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.refused, name)
	delete(s.callers, name)
	delete(s.routes, name)
	if _, ok := s.fleets[name]; !ok {
		return
	}
	delete(s.fleets, name)
	if err := s.applyLocked(); err != nil {
		s.log.Error("remove fleet from the load balancer", "fleet", name, "err", err)
	}
}

// RegionOf returns the region of an instance of the fleets it was last given, "" when it has none
// or was not given: what the Monitor counts each region's load by (MonitorOptions.RegionOf).
func (s *Sync) RegionOf(instance string) string {
	s.regionsMu.Lock()
	defer s.regionsMu.Unlock()
	return s.regionOf[instance]
}

// setRegions records the regions of a fleet's instances, forgetting those it no longer has.
func (s *Sync) setRegions(fleet string, instances []*v1alpha1.Instance) {
	s.regionsMu.Lock()
	defer s.regionsMu.Unlock()
	if s.regionOf == nil {
		s.regionOf, s.instances = map[string]string{}, map[string][]string{}
	}
	for _, name := range s.instances[fleet] {
		delete(s.regionOf, name)
	}
	names := make([]string, 0, len(instances))
	for _, in := range instances {
		s.regionOf[in.Metadata.Name] = in.Spec.Region
		names = append(names, in.Metadata.Name)
	}
	if len(names) == 0 {
		delete(s.instances, fleet)
		return
	}
	s.instances[fleet] = names
}

// Drained implements controller.TargetSink: an instance is drained once the load balancer has no
// target for it any more (removed targets stay, as draining, until their requests finish).
func (s *Sync) Drained(instance string) bool {
	for _, h := range s.lb.Health() {
		if h.ID == instance {
			return false
		}
	}
	return true
}

// Health returns each instance's worst state over its listeners, for `herd get instances`.
func (s *Sync) Health() map[string]string {
	out := map[string]string{}
	for _, h := range s.lb.Health() {
		if cur, ok := out[h.ID]; !ok || h.State.Worse(lb.State(cur)) {
			out[h.ID] = string(h.State)
		}
	}
	return out
}

func (s *Sync) applyLocked() error {
	names := make([]string, 0, len(s.fleets))
	for n := range s.fleets {
		names = append(names, n)
	}
	sort.Strings(names)
	var cfg lb.Config
	for _, n := range names {
		cfg.Listeners = append(cfg.Listeners, s.fleets[n]...)
	}
	if limitsCallers(cfg.Listeners) {
		cfg.Callers = map[netip.Addr]string{}
		for _, addrs := range s.callers {
			maps.Copy(cfg.Callers, addrs)
		}
	}
	start := time.Now()
	if err := s.applyWithRouters(cfg); err != nil {
		return fmt.Errorf("apply load balancer config: %w", err)
	}
	s.log.Debug("load balancer config applied", "listeners", len(cfg.Listeners), "took", time.Since(start).String())
	return nil
}

// Callers are the instances by address, with their fleet, when a listener of listeners limits
// the fleets that may call it (lb.Listener.AllowFrom): what tells the load balancer the fleet of
// a request; nil otherwise, so that a configuration without allowFrom does not change with every
// instance.
func Callers(listeners []lb.Listener, instances iter.Seq[*v1alpha1.Instance]) map[netip.Addr]string {
	if !limitsCallers(listeners) {
		return nil
	}
	return callerAddrs(instances)
}

// limitsCallers reports whether a listener has allowFrom.
func limitsCallers(listeners []lb.Listener) bool {
	return slices.ContainsFunc(listeners, func(l lb.Listener) bool { return len(l.AllowFrom) > 0 })
}

// limitsCallersLocked reports whether a listener of the load balancer has allowFrom.
func (s *Sync) limitsCallersLocked() bool {
	for _, ls := range s.fleets {
		if limitsCallers(ls) {
			return true
		}
	}
	return false
}

// callerAddrs are the instances with an address, by address, with their fleet.
func callerAddrs(instances iter.Seq[*v1alpha1.Instance]) map[netip.Addr]string {
	out := map[netip.Addr]string{}
	for in := range instances {
		if a, err := netip.ParseAddr(in.Status.Address); err == nil {
			out[a.Unmap()] = in.Spec.Fleet
		}
	}
	return out
}
