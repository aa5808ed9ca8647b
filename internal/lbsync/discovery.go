package lbsync

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/lb"
)

// Discovery names on the standard port: a load balancer whose address the fleets' discovery
// names resolve to gets one host router (lb.HostRoute) on Discovery.Port, 80, which sends a
// call of http://NAME.<zone>/ to the listener spec.discovery.port names
// (v1alpha1.Fleet.DiscoveryListener), so a workload calls another fleet by its name alone. The
// names with a listener's port keep reaching that listener on its own socket.

// Discovery configures the host router of the discovery names.
type Discovery struct {
	// Zone is the discovery zone, e.g. "herd.internal.".
	Zone string
	// Port is the port the names alone are called on (herd up --discovery-http-port): 80. 0: no
	// host router.
	Port int
	// Gateway gives the host's address on a region's bridge (the local provider's), where the
	// instances of the region reach herd up's own load balancer when it listens on every
	// address: the router binds there for every region with instances, not on every address of
	// the host. Nil: no such address.
	Gateway func(region string) (netip.Addr, bool)
}

// PortFlag is the herd up flag that sets Discovery.Port, for errors.
const PortFlag = "--discovery-http-port"

// discoveryRoute is the host route of fleet f's discovery name in zone, when the name alone has a
// listener to reach among f's listeners ls (one without a certificate is left out of them).
func discoveryRoute(f *v1alpha1.Fleet, zone string, ls []lb.Listener) (lb.HostRoute, bool) {
	l, ok := f.DiscoveryListener()
	if !ok {
		return lb.HostRoute{}, false
	}
	name := f.Metadata.Name + "/" + l.Name
	if !slices.ContainsFunc(ls, func(x lb.Listener) bool { return x.Name == name }) {
		return lb.HostRoute{}, false
	}
	host := strings.ToLower(f.Spec.Discovery.Name + "." + strings.TrimSuffix(zone, "."))
	return lb.HostRoute{Host: host, Listener: name}, true
}

// Routers are the host routers of the discovery names in routes, one per bind host (hosts; ""
// is every address), on port. None when there is no route; an error, and none, when a listener
// of listeners has the port already: the names alone then cannot be served there.
func Routers(routes []lb.HostRoute, hosts []string, port int, listeners []lb.Listener) ([]lb.Listener, error) {
	if len(routes) == 0 || len(hosts) == 0 || port == 0 {
		return nil, nil
	}
	for _, l := range listeners {
		if _, p, err := net.SplitHostPort(l.Address); err == nil && p == strconv.Itoa(port) {
			return nil, fmt.Errorf("the discovery names alone are not served: listener %s of fleet %s has port %d, where they are called; move the listener to another port, or start herd up with %s set to another port", l.Name, l.Fleet, port, PortFlag)
		}
	}
	routes = slices.Clone(routes)
	sort.Slice(routes, func(i, j int) bool { return routes[i].Host < routes[j].Host })
	out := make([]lb.Listener, 0, len(hosts))
	for _, h := range hosts {
		out = append(out, lb.Listener{Name: "discovery@" + h, Address: net.JoinHostPort(h, strconv.Itoa(port)), Routes: routes})
	}
	return out, nil
}

// DiscoveryRoutes are the host routes of the published fleets among fleets, each with the
// listeners built for it (Listeners).
func DiscoveryRoutes(zone string, fleets []*v1alpha1.Fleet, listeners [][]lb.Listener) []lb.HostRoute {
	var out []lb.HostRoute
	for i, f := range fleets {
		if r, ok := discoveryRoute(f, zone, listeners[i]); ok {
			out = append(out, r)
		}
	}
	return out
}

// SetDiscovery gives herd up's own load balancer a host router for the discovery names, from
// the next change on.
func (s *Sync) SetDiscovery(d Discovery) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.discovery = d
}

// setRouteLocked records the host route of f's discovery name, and reports whether it changed.
func (s *Sync) setRouteLocked(f *v1alpha1.Fleet, ls []lb.Listener) bool {
	var route lb.HostRoute
	routed := false
	if s.discovery.Port != 0 {
		route, routed = discoveryRoute(f, s.discovery.Zone, ls)
	}
	if old, had := s.routes[f.Metadata.Name]; had == routed && old == route {
		return false
	}
	if routed {
		s.routes[f.Metadata.Name] = route
	} else {
		delete(s.routes, f.Metadata.Name)
	}
	return true
}

// routerHosts are where herd up's own load balancer serves the discovery names alone: where the
// names resolve to (docs/discovery.md): its address, unless it is a loopback one, which no
// instance reaches; on every address, each region's bridge address.
func (s *Sync) routerHosts() []string {
	addr, err := netip.ParseAddr(s.bindHost)
	switch {
	case err != nil || addr.IsLoopback():
		return nil
	case !addr.IsUnspecified():
		return []string{s.bindHost}
	case s.discovery.Gateway == nil:
		return nil
	}
	s.regionsMu.Lock()
	regions := map[string]bool{}
	for _, r := range s.regionOf {
		regions[r] = true
	}
	s.regionsMu.Unlock()
	var out []string
	for r := range regions {
		if a, ok := s.discovery.Gateway(r); ok && !slices.Contains(out, a.String()) {
			out = append(out, a.String())
		}
	}
	sort.Strings(out)
	return out
}

// applyWithRouters applies cfg with the host routers of the discovery names, or, when the load
// balancer cannot have those (port 80 taken on the host), without them, saying why in the log
// once: the fleets' own listeners must not suffer for the names.
func (s *Sync) applyWithRouters(cfg lb.Config) error {
	var routes []lb.HostRoute
	for _, r := range s.routes {
		routes = append(routes, r)
	}
	routers, why := Routers(routes, s.routerHosts(), s.discovery.Port, cfg.Listeners)
	if len(routers) > 0 {
		with := cfg
		with.Listeners = append(slices.Clone(cfg.Listeners), routers...)
		err := s.lb.Apply(with)
		if err == nil {
			s.noteRouters(nil)
			return nil
		}
		why = fmt.Errorf("the discovery names alone are not served on port %d: %w; free the port, or start herd up with %s set to another port (0: the names answer on the listeners' ports only)", s.discovery.Port, err, PortFlag)
	}
	if err := s.lb.Apply(cfg); err != nil {
		return err
	}
	s.noteRouters(why)
	return nil
}

// noteRouters logs why the discovery names alone are not served, when that changed.
func (s *Sync) noteRouters(why error) {
	msg := ""
	if why != nil {
		msg = why.Error()
	}
	if msg == s.routersErr {
		return
	}
	s.routersErr = msg
	if why != nil {
		s.log.Error("discovery names on the standard port", "err", why)
	}
}
