package v1alpha1

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// DefaultDiscoveryZone is the zone fleets are published in to each other's instances
// (`herd up --discovery-zone`).
const DefaultDiscoveryZone = "herd.internal."

// Discovery publishes a fleet to the instances of other fleets as NAME.<discovery zone> (by
// default web.herd.internal), answered by herd's DNS with the fleet's regional load balancer in
// the caller's own region, or another region's when the caller's region has no healthy instance
// of it. Calls go through the load balancers, so they get health checks, retries and draining.
type Discovery struct {
	// Enabled publishes the fleet. A fleet needs a listener to be reached, so one without listeners
	// is not published. Default: true when the fleet has a listener, false otherwise.
	Enabled *bool `json:"enabled,omitempty"`
	// Name is the name's first label, a DNS label unique among the fleets. Default: the fleet's name.
	Name string `json:"name,omitempty"`
	// AllowFrom, when set, are the only fleets whose instances may call this one: the name does not
	// resolve for the instances of other fleets, and the regional load balancers refuse their
	// connections (HTTP 403 with a body that says why). Default: every fleet.
	AllowFrom []string `json:"allowFrom,omitempty"`
	// Port is the port of the listener (spec.listeners[].port) that the name alone reaches: a
	// call on the standard HTTP port, http://NAME.<zone>/, goes to this listener, while
	// http://NAME.<zone>:PORT/ reaches the listener of that port. It must be an http listener
	// without tls (the standard port is cleartext, routed by the Host header). Default: the
	// first http listener without tls; a fleet with none answers on its listeners' ports only.
	Port int32 `json:"port,omitempty"`
}

// DiscoveryListener is the listener that a call of the fleet's discovery name on the standard
// HTTP port reaches (spec.discovery.port); ok is false when there is none. The fleet must have
// been defaulted.
func (f *Fleet) DiscoveryListener() (l Listener, ok bool) {
	if !f.Published() {
		return Listener{}, false
	}
	for _, l := range f.Spec.Listeners {
		if l.Protocol == ProtocolHTTP && l.TLS == nil && (f.Spec.Discovery.Port == 0 || l.Port == f.Spec.Discovery.Port) {
			return l, true
		}
	}
	return Listener{}, false
}

// Published reports whether the fleet is published under spec.discovery.name. The fleet must have
// been defaulted.
func (f *Fleet) Published() bool {
	d := f.Spec.Discovery
	return d != nil && d.Enabled != nil && *d.Enabled && d.Name != ""
}

// Allows reports whether the instances of fleet caller may call f: allowFrom is unset, or names it.
func (d *Discovery) Allows(caller string) bool {
	if d == nil || len(d.AllowFrom) == 0 {
		return true
	}
	for _, name := range d.AllowFrom {
		if name == caller {
			return true
		}
	}
	return false
}

// setDiscoveryDefaults fills spec.discovery; the listeners decide whether it is enabled.
func setDiscoveryDefaults(f *Fleet) {
	s := &f.Spec
	if s.Discovery == nil {
		s.Discovery = &Discovery{}
	}
	d := s.Discovery
	if d.Enabled == nil {
		on := len(s.Listeners) > 0
		d.Enabled = &on
	}
	d.Name = strings.ToLower(d.Name)
	if d.Name == "" {
		d.Name = f.Metadata.Name
	}
}

// DiscoveryWarning is what apply says of a fleet that did not write spec.discovery.enabled and
// has no listener: it is not published, which the user may not expect. written is the fleet as
// the user wrote it, before defaults.
func DiscoveryWarning(written *Fleet, zone string) string {
	if len(written.Spec.Listeners) > 0 || (written.Spec.Discovery != nil && written.Spec.Discovery.Enabled != nil) {
		return ""
	}
	return fmt.Sprintf("spec.discovery: the fleet has no listener, so it gets no name in %s and no other fleet can call it; add a listener, or set spec.discovery.enabled: false to silence this warning", strings.TrimSuffix(zone, "."))
}

// validateDiscovery checks a defaulted spec.discovery with apimachinery's field errors.
func validateDiscovery(s *FleetSpec) field.ErrorList {
	d := s.Discovery
	if d == nil {
		return nil
	}
	p := field.NewPath("spec", "discovery")
	var errs field.ErrorList
	if d.Enabled != nil && *d.Enabled && len(s.Listeners) == 0 {
		errs = append(errs, field.Invalid(p.Child("enabled"), true, "the fleet has no listener, so a name would lead nowhere: add a listener to spec.listeners, or set enabled: false"))
	}
	if msgs := validation.IsDNS1123Label(d.Name); len(msgs) > 0 {
		errs = append(errs, field.Invalid(p.Child("name"), d.Name, fmt.Sprintf("must be one DNS label such as \"api\" (the name is NAME.<zone>): %s", strings.Join(msgs, "; "))))
	}
	errs = append(errs, validateDiscoveryPort(s, p.Child("port"))...)
	seen := map[string]int{}
	for i, name := range d.AllowFrom {
		ip := p.Child("allowFrom").Index(i)
		if msgs := validation.IsDNS1123Label(name); len(msgs) > 0 {
			errs = append(errs, field.Invalid(ip, name, fmt.Sprintf("must be a fleet's name such as \"web\": %s", strings.Join(msgs, "; "))))
		}
		if j, dup := seen[name]; dup {
			errs = append(errs, field.Duplicate(ip, fmt.Sprintf("%s (also allowFrom[%d]): list each fleet once", name, j)))
		}
		seen[name] = i
	}
	return errs
}

// validateDiscoveryPort checks that spec.discovery.port names a listener the name alone can reach.
func validateDiscoveryPort(s *FleetSpec, p *field.Path) field.ErrorList {
	port := s.Discovery.Port
	if port == 0 {
		return nil
	}
	var ports []string
	for _, l := range s.Listeners {
		ports = append(ports, strconv.Itoa(int(l.Port)))
		if l.Port != port {
			continue
		}
		switch {
		case l.Protocol != ProtocolHTTP:
			return field.ErrorList{field.Invalid(p, port, fmt.Sprintf("listener %s is %s: the name alone is called over HTTP and routed by its Host header; name an http listener", l.Name, l.Protocol))}
		case l.TLS != nil:
			return field.ErrorList{field.Invalid(p, port, fmt.Sprintf("listener %s terminates TLS, and the name alone is called in cleartext on port 80; name a listener without tls, or call https://NAME.<zone>:%d/", l.Name, port))}
		}
		return nil
	}
	if len(ports) == 0 {
		return field.ErrorList{field.Invalid(p, port, "the fleet has no listener: add one to spec.listeners, or leave port out")}
	}
	return field.ErrorList{field.Invalid(p, port, fmt.Sprintf("no listener has this port: name one of spec.listeners[].port (%s)", strings.Join(ports, ", ")))}
}
