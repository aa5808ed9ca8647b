package v1alpha1

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// RoutingPolicy is how herd's authoritative DNS picks the regions a hostname answers with.
type RoutingPolicy string

// Routing policies, named after Route 53's routing policies.
const (
	// PolicyFailover answers with the first healthy region in failover order.
	PolicyFailover RoutingPolicy = "failover"
	// PolicyWeighted answers with one healthy region chosen by weight, the same one for every
	// query from the same client subnet.
	PolicyWeighted RoutingPolicy = "weighted"
	// PolicyGeo answers with the region whose CIDR holds the client subnet, or the default.
	PolicyGeo RoutingPolicy = "geo"
	// PolicyLatency answers with the healthy region of the lowest round-trip time measured from
	// the client's network by the regional load balancers; unknown networks fall back.
	PolicyLatency RoutingPolicy = "latency"
)

// Defaults of spec.global.
const (
	DefaultGlobalTTL           = 5 * time.Second
	DefaultMinHealthyInstances = 1
)

// Global is how users find the fleet across regions: a hostname in herd's authoritative DNS zone
// answered with the addresses of the regional load balancers, by policy and health.
type Global struct {
	// Hostname is the fully qualified name users resolve, inside the zone herd's DNS serves
	// (`herd up --dns-zone`), e.g. "hello.herd.test". Required.
	Hostname string `json:"hostname"`
	// Policy is failover, weighted, geo or latency. Default: failover.
	Policy RoutingPolicy `json:"policy,omitempty"`
	// TTL is the time resolvers may cache an answer (1s to 1h). Short, so that a region that
	// leaves the answers is left by clients soon. Default: 5s.
	TTL *Duration `json:"ttl,omitempty"`
	// MinHealthyInstances is the fewest Ready instances a region needs to be in the answers.
	// Default: 1.
	MinHealthyInstances *int32 `json:"minHealthyInstances,omitempty"`
	// Weights are each region's relative share of client subnets with policy weighted (0 to 1000;
	// 0 keeps the region out unless no other is healthy). Default: 1 for every region.
	Weights map[string]int32 `json:"weights,omitempty"`
	// Geo maps client subnets to regions with policy geo, and with policy latency when
	// latencyFallback is geo. The longest matching prefix wins.
	Geo *GeoRouting `json:"geo,omitempty"`
	// FailoverOrder is the order in which regions take over with policy failover, and the order
	// of preference whenever the chosen region is unhealthy. Default: the order of spec.regions.
	FailoverOrder []string `json:"failoverOrder,omitempty"`
	// LatencyFallback is what policy latency does for a client network no load balancer has
	// measured yet: geo or weighted. Default: geo when geo is set, else weighted.
	LatencyFallback RoutingPolicy `json:"latencyFallback,omitempty"`
}

// GeoRouting maps client subnets to regions.
type GeoRouting struct {
	// CIDRs maps a client subnet ("10.216.0.0/25", "2001:db8::/32") to a region.
	CIDRs map[string]string `json:"cidrs,omitempty"`
	// Default is the region of clients no CIDR matches. Default: the first region of
	// failoverOrder.
	Default string `json:"default,omitempty"`
}

// setGlobalDefaults fills spec.global's unset fields; spec.regions must be defaulted first.
func setGlobalDefaults(s *FleetSpec) {
	g := s.Global
	if g == nil {
		return
	}
	g.Hostname = strings.ToLower(strings.TrimSuffix(g.Hostname, "."))
	if g.Policy == "" {
		g.Policy = PolicyFailover
	}
	if g.TTL == nil {
		g.TTL = durp(DefaultGlobalTTL)
	}
	if g.MinHealthyInstances == nil {
		g.MinHealthyInstances = int32p(DefaultMinHealthyInstances)
	}
	if len(g.FailoverOrder) == 0 {
		for _, r := range s.Regions {
			g.FailoverOrder = append(g.FailoverOrder, r.Name)
		}
	}
	if g.Policy == PolicyWeighted || g.Policy == PolicyLatency {
		if g.Weights == nil {
			g.Weights = map[string]int32{}
		}
		for _, r := range s.Regions {
			if _, ok := g.Weights[r.Name]; !ok {
				g.Weights[r.Name] = 1
			}
		}
	}
	if g.Geo != nil && g.Geo.Default == "" && len(g.FailoverOrder) > 0 {
		g.Geo.Default = g.FailoverOrder[0]
	}
	if g.Policy == PolicyLatency && g.LatencyFallback == "" {
		g.LatencyFallback = PolicyWeighted
		if g.Geo != nil {
			g.LatencyFallback = PolicyGeo
		}
	}
}

// validateGlobal checks a defaulted spec.global with apimachinery's field errors and returns them
// in the API's own list.
func validateGlobal(s *FleetSpec) ErrorList {
	var out ErrorList
	for _, e := range globalFieldErrors(s) {
		out = append(out, FieldError{Field: e.Field, Message: e.ErrorBody()})
	}
	return out
}

func globalFieldErrors(s *FleetSpec) field.ErrorList {
	g := s.Global
	if g == nil {
		return nil
	}
	p := field.NewPath("spec", "global")
	var errs field.ErrorList
	regions := map[string]bool{}
	for _, r := range s.Regions {
		regions[r.Name] = true
	}
	known := func(path *field.Path, name string) {
		if !regions[name] {
			errs = append(errs, field.Invalid(path, name, fmt.Sprintf("names no region of spec.regions (got %q): use one of %s", name, regionList(s))))
		}
	}

	if g.Hostname == "" {
		errs = append(errs, field.Required(p.Child("hostname"), "the name users resolve, inside herd's DNS zone, e.g. \"hello.herd.test\""))
	} else if msgs := validation.IsDNS1123Subdomain(g.Hostname); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("hostname"), g.Hostname, fmt.Sprintf("must be a DNS name such as \"hello.herd.test\" (got %q): %s", g.Hostname, strings.Join(msgs, "; "))))
	}
	switch g.Policy {
	case PolicyFailover, PolicyWeighted, PolicyGeo, PolicyLatency:
	default:
		errs = append(errs, field.NotSupported(p.Child("policy"), g.Policy, []RoutingPolicy{PolicyFailover, PolicyWeighted, PolicyGeo, PolicyLatency}))
	}
	if g.TTL != nil && (g.TTL.Duration < time.Second || g.TTL.Duration > time.Hour || g.TTL.Duration%time.Second != 0) {
		errs = append(errs, field.Invalid(p.Child("ttl"), g.TTL.Duration.String(), fmt.Sprintf("must be whole seconds between 1s and 1h (got %s): DNS counts TTLs in seconds", g.TTL.Duration)))
	}
	if g.MinHealthyInstances != nil && *g.MinHealthyInstances < 0 {
		errs = append(errs, field.Invalid(p.Child("minHealthyInstances"), *g.MinHealthyInstances, fmt.Sprintf("must be >= 0 (got %d)", *g.MinHealthyInstances)))
	}

	total := int64(0)
	for _, name := range slices.Sorted(maps.Keys(g.Weights)) {
		w := g.Weights[name]
		known(p.Child("weights").Key(name), name)
		if w < 0 || w > 1000 {
			errs = append(errs, field.Invalid(p.Child("weights").Key(name), w, fmt.Sprintf("must be between 0 and 1000 (got %d)", w)))
		}
		total += int64(w)
	}
	if g.Policy == PolicyWeighted && len(g.Weights) > 0 && total == 0 {
		errs = append(errs, field.Invalid(p.Child("weights"), total, "must give at least one region a weight above 0: with all weights 0 no region would get clients"))
	}

	seen := map[string]int{}
	for i, name := range g.FailoverOrder {
		known(p.Child("failoverOrder").Index(i), name)
		if j, dup := seen[name]; dup {
			errs = append(errs, field.Invalid(p.Child("failoverOrder").Index(i), name, fmt.Sprintf("duplicates failoverOrder[%d]: list each region once", j)))
		}
		seen[name] = i
	}

	if geo := g.Geo; geo != nil {
		for _, cidr := range slices.Sorted(maps.Keys(geo.CIDRs)) {
			cp := p.Child("geo", "cidrs").Key(cidr)
			pf, err := netip.ParsePrefix(cidr)
			if err != nil {
				errs = append(errs, field.Invalid(cp, cidr, fmt.Sprintf("must be a CIDR such as \"10.216.0.0/25\" or \"2001:db8::/32\" (got %q)", cidr)))
			} else if pf.Masked() != pf {
				errs = append(errs, field.Invalid(cp, cidr, fmt.Sprintf("has host bits set: write %s", pf.Masked())))
			}
			known(cp, geo.CIDRs[cidr])
		}
		if geo.Default != "" {
			known(p.Child("geo", "default"), geo.Default)
		}
	}
	if g.Policy == PolicyGeo && (g.Geo == nil || len(g.Geo.CIDRs) == 0) {
		errs = append(errs, field.Required(p.Child("geo", "cidrs"), "needed by policy geo: map client subnets to regions, e.g. {\"10.216.0.0/25\": \"eu\"}"))
	}
	switch g.LatencyFallback {
	case "":
	case PolicyGeo:
		if g.Geo == nil {
			errs = append(errs, field.Required(p.Child("geo"), "needed by latencyFallback geo: give geo.cidrs, or set latencyFallback: weighted"))
		}
	case PolicyWeighted:
	default:
		errs = append(errs, field.NotSupported(p.Child("latencyFallback"), g.LatencyFallback, []RoutingPolicy{PolicyGeo, PolicyWeighted}))
	}
	if g.LatencyFallback != "" && g.Policy != PolicyLatency {
		errs = append(errs, field.Invalid(p.Child("latencyFallback"), g.LatencyFallback, fmt.Sprintf("only used with policy latency (policy is %s): remove it or set policy: latency", g.Policy)))
	}
	return errs
}

func regionList(s *FleetSpec) string {
	names := make([]string, len(s.Regions))
	for i, r := range s.Regions {
		names[i] = fmt.Sprintf("%q", r.Name)
	}
	return strings.Join(names, ", ")
}
