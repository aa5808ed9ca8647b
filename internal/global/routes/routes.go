// Package routes computes what herd's authoritative DNS answers for each fleet with spec.global:
// per region, its load balancer's data addresses, whether it is healthy (reachable from outside
// the region and with enough Ready instances) and why, plus the round-trip times the regional load
// balancers measured per client network. The control plane serves the result as GET /v1/routes;
// the DNS server, in-process or alone (`herd dns`), answers from it. Live keeps the table current
// from the shared informer without walking the instances.
package routes

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// Table is everything herd's DNS answers from. It is a value: once built it is never changed.
type Table struct {
	// Routes are the hostnames, sorted by hostname.
	Routes []Route `json:"routes"`
	// RTT is the smoothed round-trip time from each client network (/24, /48 for IPv6) to each
	// region's load balancer, as the load balancers measured it.
	RTT map[netip.Prefix]map[string]time.Duration `json:"rtt,omitempty"`
	// Discovery are the fleets published to other fleets' instances (spec.discovery), sorted by
	// name: Hostname is the name's label, without the discovery zone; Regions are in the order of
	// spec.regions, each with the address the instances reach its load balancer on, healthy
	// with a Ready instance whatever its reachability from outside.
	Discovery []Route `json:"discovery,omitempty"`
	// DiscoveryZone is the zone the discovery names are in (herd up --discovery-zone).
	DiscoveryZone string `json:"discoveryZone,omitempty"`
	// DiscoveryHTTPPort is the port the discovery names are called on alone (herd up
	// --discovery-http-port): the load balancers route it by Host to each route's Port. 0: none.
	DiscoveryHTTPPort int `json:"discoveryHTTPPort,omitempty"`
	// Callers are the instances by address, with their fleet and region: who asks, when a
	// discovery query comes from that address.
	Callers map[netip.Addr]FleetRegion `json:"callers,omitempty"`
}

// Route is one fleet's hostname and the regions that may answer it.
type Route struct {
	Fleet string `json:"fleet"`
	// Hostname is lower case, without the trailing dot.
	Hostname string                 `json:"hostname"`
	Policy   v1alpha1.RoutingPolicy `json:"policy"`
	// TTLSeconds is the answers' TTL.
	TTLSeconds uint32 `json:"ttlSeconds"`
	// Regions are in failover order.
	Regions []RegionRoute `json:"regions"`
	// Geo is the CIDR map, longest prefix first.
	Geo             []GeoRule              `json:"geo,omitempty"`
	GeoDefault      string                 `json:"geoDefault,omitempty"`
	LatencyFallback v1alpha1.RoutingPolicy `json:"latencyFallback,omitempty"`
	// AllowFrom, on a discovery route, are the only fleets whose instances get an answer.
	AllowFrom []string `json:"allowFrom,omitempty"`
	// Port, on a discovery route, is the port of the listener the name alone reaches
	// (spec.discovery.port); 0 when it reaches none.
	Port int32 `json:"port,omitempty"`
}

// RegionRoute is one region of a route.
type RegionRoute struct {
	Name string `json:"name"`
	// Addresses are the regional load balancer's data addresses.
	Addresses []netip.Addr `json:"addresses,omitempty"`
	Weight    int32        `json:"weight"`
	Ready     int32        `json:"ready"`
	MinReady  int32        `json:"minReady"`
	Reachable bool         `json:"reachable"`
	// Healthy: reachable, at least MinReady Ready instances, and an address to answer with.
	Healthy bool `json:"healthy"`
	// Why says why the region is healthy or not, for people.
	Why string `json:"why"`
}

// GeoRule sends the clients of a subnet to a region.
type GeoRule struct {
	Prefix netip.Prefix `json:"prefix"`
	Region string       `json:"region"`
}

// Eligible returns the indexes of the regions that may be in answers: the healthy ones, or every
// region with an address when none is healthy (fail open, as Route 53 does), with failOpen set.
func (r *Route) Eligible() (idx []int, failOpen bool) {
	for i, rg := range r.Regions {
		if rg.Healthy {
			idx = append(idx, i)
		}
	}
	if len(idx) > 0 {
		return idx, false
	}
	for i, rg := range r.Regions {
		if len(rg.Addresses) > 0 {
			idx = append(idx, i)
		}
	}
	return idx, true
}

// LBAddresses gives the data addresses of a region's load balancer (where clients reach it).
type LBAddresses interface {
	RegionLBAddresses(ctx context.Context, region string) ([]netip.Addr, error)
}

// Reachability says whether a region's load balancer answers checks from outside the region.
type Reachability interface {
	RegionUnreachable(region string) (why string, unreachable bool)
}

// RTTSource gives the smoothed round-trip times the regional load balancers measured, per client
// network (/24, /48) and region.
type RTTSource interface {
	ClientRTTs() map[netip.Prefix]map[string]time.Duration
}

// Inputs are what Compute reads. Reach and RTT may be nil: every region is then reachable and no
// client network has been measured.
type Inputs struct {
	Fleets []*v1alpha1.Fleet
	// Instances are counted into Ready when Ready is nil.
	Instances []*v1alpha1.Instance
	// Ready counts the Ready instances per fleet and region.
	Ready map[FleetRegion]int32
	LB    LBAddresses
	Reach Reachability
	RTT   RTTSource
	// Published are the fleets with spec.discovery on (defaulted), and InstanceLB the addresses
	// the instances reach each region's load balancer on (LB when nil).
	Published  []*v1alpha1.Fleet
	InstanceLB LBAddresses
	// Callers are the instances by address: Instances' when nil.
	Callers map[netip.Addr]FleetRegion
	// Regional reports whether a fleet is served by its regions' own load balancers, and
	// EmbeddedLB the addresses the instances of each region reach herd up's own load balancer
	// on, which serves the published fleets Regional says no region's load balancer serves. A
	// region's load balancer serves only the fleets served regionally, so the address it has in
	// a region is no answer for the others. With either nil every fleet takes InstanceLB's.
	Regional   func(*v1alpha1.Fleet) bool
	EmbeddedLB LBAddresses
}

// FleetRegion names one region of one fleet.
type FleetRegion struct {
	Fleet  string `json:"fleet"`
	Region string `json:"region"`
}

// Compute builds the table from the fleets with spec.global (defaulted, as stored). A region whose
// load balancer's address cannot be had is in the table without addresses and unhealthy, with the
// error as its reason.
func Compute(ctx context.Context, in Inputs) Table {
	ready := in.Ready
	if ready == nil {
		ready = map[FleetRegion]int32{}
		for _, inst := range in.Instances {
			if inst.Status.Phase == v1alpha1.PhaseReady {
				ready[FleetRegion{inst.Spec.Fleet, inst.Spec.Region}]++
			}
		}
	}
	var t Table
	global := regionAddresses{lb: in.LB}
	for _, f := range in.Fleets {
		g := f.Spec.Global
		if g == nil || g.Hostname == "" {
			continue
		}
		r := Route{
			Fleet: f.Metadata.Name, Hostname: g.Hostname, Policy: g.Policy,
			TTLSeconds: uint32(v1alpha1.DefaultGlobalTTL / time.Second), LatencyFallback: g.LatencyFallback,
		}
		if g.TTL != nil {
			r.TTLSeconds = uint32(g.TTL.Duration / time.Second)
		}
		minReady := int32(v1alpha1.DefaultMinHealthyInstances)
		if g.MinHealthyInstances != nil {
			minReady = *g.MinHealthyInstances
		}
		for _, name := range failoverOrder(f) {
			rg := global.region(ctx, name, ready[FleetRegion{f.Metadata.Name, name}], minReady, true, in.Reach)
			if w, ok := g.Weights[name]; ok {
				rg.Weight = w
			}
			r.Regions = append(r.Regions, rg)
		}
		if geo := g.Geo; geo != nil {
			r.GeoDefault = geo.Default
			for cidr, region := range geo.CIDRs {
				if p, err := netip.ParsePrefix(cidr); err == nil {
					r.Geo = append(r.Geo, GeoRule{Prefix: p.Masked(), Region: region})
				}
			}
			SortGeo(r.Geo)
		}
		t.Routes = append(t.Routes, r)
	}
	slices.SortFunc(t.Routes, func(a, b Route) int { return cmp.Compare(a.Hostname, b.Hostname) })
	if in.RTT != nil {
		t.RTT = in.RTT.ClientRTTs()
	}
	t.Discovery = discoveryRoutes(ctx, in, ready)
	t.Callers = in.Callers
	if t.Callers == nil && len(t.Discovery) > 0 {
		t.Callers = callers(in.Instances)
	}
	return t
}

// discoveryRoutes are the published fleets' routes: every region of spec.regions in order, with
// the address its instances reach the fleet's load balancer on (the region's own, or herd up's
// for a fleet no region's load balancer serves), healthy with one Ready instance. An instance
// calls from inside a region, so the region's reachability from outside does not count.
func discoveryRoutes(ctx context.Context, in Inputs, ready map[FleetRegion]int32) []Route {
	lb := in.InstanceLB
	if lb == nil {
		lb = in.LB
	}
	regional, embedded := regionAddresses{lb: lb}, regionAddresses{lb: in.EmbeddedLB}
	var out []Route
	for _, f := range in.Published {
		if !f.Published() {
			continue
		}
		addrs := &regional
		if in.Regional != nil && in.EmbeddedLB != nil && !in.Regional(f) {
			addrs = &embedded
		}
		r := Route{Fleet: f.Metadata.Name, Hostname: f.Spec.Discovery.Name, Policy: v1alpha1.PolicyFailover,
			TTLSeconds: uint32(v1alpha1.DefaultGlobalTTL / time.Second), AllowFrom: f.Spec.Discovery.AllowFrom}
		if l, ok := f.DiscoveryListener(); ok {
			r.Port = l.Port
		}
		for _, rg := range f.Spec.Regions {
			r.Regions = append(r.Regions, addrs.region(ctx, rg.Name, ready[FleetRegion{f.Metadata.Name, rg.Name}], 1, false, nil))
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b Route) int { return cmp.Compare(a.Hostname, b.Hostname) })
	return out
}

// callers maps the instances' addresses to their fleet and region.
func callers(instances []*v1alpha1.Instance) map[netip.Addr]FleetRegion {
	out := map[netip.Addr]FleetRegion{}
	for _, inst := range instances {
		if a, ok := callerAddr(inst); ok {
			out[a] = FleetRegion{inst.Spec.Fleet, inst.Spec.Region}
		}
	}
	return out
}

// callerAddr is the address an instance's queries come from.
func callerAddr(inst *v1alpha1.Instance) (netip.Addr, bool) {
	if inst == nil || inst.Status.Address == "" {
		return netip.Addr{}, false
	}
	a, err := netip.ParseAddr(inst.Status.Address)
	return a.Unmap(), err == nil
}

// regionAddresses reads each region's load balancer addresses once per Compute.
type regionAddresses struct {
	lb    LBAddresses
	addrs map[string][]netip.Addr
	errs  map[string]error
}

// region is one region of a route, healthy when its load balancer has an address, it is
// reachable from outside (when that counts; reach nil: always) and it has minReady Ready
// instances; Why says which failed.
func (a *regionAddresses) region(ctx context.Context, name string, ready, minReady int32, fromOutside bool, reach Reachability) RegionRoute {
	if a.addrs == nil {
		a.addrs, a.errs = map[string][]netip.Addr{}, map[string]error{}
	}
	if _, done := a.addrs[name]; !done && a.errs[name] == nil && a.lb != nil {
		addrs, err := a.lb.RegionLBAddresses(ctx, name)
		if err != nil {
			a.errs[name] = err
		} else {
			a.addrs[name] = addrs
		}
	}
	rg := RegionRoute{Name: name, Addresses: a.addrs[name], Weight: 1, Ready: ready, MinReady: minReady, Reachable: true}
	unreachableWhy := ""
	if reach != nil {
		unreachableWhy, rg.Reachable = reach.RegionUnreachable(name)
		rg.Reachable = !rg.Reachable
	}
	switch {
	case a.errs[name] != nil:
		rg.Why = fmt.Sprintf("no load balancer address: %v", a.errs[name])
	case len(rg.Addresses) == 0:
		rg.Why = "no load balancer address"
	case !rg.Reachable:
		rg.Why = "unreachable from outside the region: " + unreachableWhy
	case rg.Ready < minReady:
		rg.Why = fmt.Sprintf("%d Ready instances, fewer than minHealthyInstances %d", rg.Ready, minReady)
	case !fromOutside:
		rg.Healthy = true
		rg.Why = fmt.Sprintf("%d Ready instances (min %d)", rg.Ready, minReady)
	default:
		rg.Healthy = true
		rg.Why = fmt.Sprintf("reachable, %d Ready instances (min %d)", rg.Ready, minReady)
	}
	return rg
}

// SortGeo orders rules longest prefix first (then by address), so the first match is the most
// specific.
func SortGeo(rules []GeoRule) {
	slices.SortFunc(rules, func(a, b GeoRule) int {
		if c := cmp.Compare(b.Prefix.Bits(), a.Prefix.Bits()); c != 0 {
			return c
		}
		return a.Prefix.Addr().Compare(b.Prefix.Addr())
	})
}

// failoverOrder is spec.global.failoverOrder, or the order of spec.regions, followed by any region
// of spec.regions it leaves out.
func failoverOrder(f *v1alpha1.Fleet) []string {
	order := slices.Clone(f.Spec.Global.FailoverOrder)
	for _, r := range f.Spec.Regions {
		if !slices.Contains(order, r.Name) {
			order = append(order, r.Name)
		}
	}
	return order
}

// DiscoveryHostname is a discovery route's name in zone, without the trailing dot.
func (r *Route) DiscoveryHostname(zone string) string {
	return r.Hostname + "." + strings.TrimSuffix(zone, ".")
}

// DiscoveryAnswer says, for each region of a discovery route, how it takes part in the answers:
// "in" (it answers its own callers, and those of regions that cannot), "out", or
// "in (fail open)" when no region is healthy.
func (r *Route) DiscoveryAnswer() []string {
	idx, failOpen := r.Eligible()
	out := make([]string, len(r.Regions))
	for i := range out {
		out[i] = "out"
	}
	for _, i := range idx {
		out[i] = "in"
		if failOpen {
			out[i] = "in (fail open)"
		}
	}
	return out
}

// Answer says, for each region in order, how it takes part in the hostname's answers now:
// "primary" or "standby" (failover), "in" (weighted, with its weight; geo; latency), "out", or
// "in (fail open)" when no region is healthy.
func (r *Route) Answer() []string {
	idx, failOpen := r.Eligible()
	out := make([]string, len(r.Regions))
	for i := range out {
		out[i] = "out"
	}
	for n, i := range idx {
		switch {
		case failOpen:
			out[i] = "in (fail open)"
		case r.Policy == v1alpha1.PolicyFailover && n == 0:
			out[i] = "primary"
		case r.Policy == v1alpha1.PolicyFailover:
			out[i] = "standby"
		case r.Policy == v1alpha1.PolicyWeighted:
			out[i] = fmt.Sprintf("in (weight %d)", r.Regions[i].Weight)
		default:
			out[i] = "in"
		}
	}
	return out
}
