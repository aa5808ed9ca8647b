package controlplane

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"strconv"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/lbsync"
)

// discoveryHTTP is how the load balancers serve the discovery names alone, on the standard
// port (herd up --discovery-http-port): none without the discovery DNS, which is what makes the
// names resolve. herd up's own load balancer on every address serves them on each region's
// bridge address, where the names of the fleets it serves resolve.
func (p *parts) discoveryHTTP() lbsync.Discovery {
	if p.opts.DiscoveryListen == "" || p.opts.DiscoveryHTTPPort == 0 {
		return lbsync.Discovery{}
	}
	d := lbsync.Discovery{Zone: cmp.Or(p.opts.DiscoveryZone, v1alpha1.DefaultDiscoveryZone), Port: p.opts.DiscoveryHTTPPort}
	var gateways []regionGateway
	for _, prov := range p.providers {
		if g, ok := prov.(regionGateway); ok {
			gateways = append(gateways, g)
		}
	}
	d.Gateway = func(region string) (netip.Addr, bool) {
		for _, g := range gateways {
			if a, ok := g.RegionGateway(region); ok {
				return a, true
			}
		}
		return netip.Addr{}, false
	}
	return d
}

// checkDiscoveryHTTP refuses to start when herd up's own load balancer listens on one address
// the instances reach and the port of the discovery names is taken there: it would serve every
// fleet but not the names alone. (On every address the names are served on the regions' bridge
// addresses, which appear with the regions; a port taken there is logged, and the fleets' own
// listeners are served all the same.)
func (p *parts) checkDiscoveryHTTP() error {
	if port := p.opts.DiscoveryHTTPPort; port < 0 || port > 65535 {
		return fmt.Errorf("%s: %d is not a port: give one from 1 to 65535, or 0 for none", lbsync.PortFlag, port)
	}
	d := p.discoveryHTTP()
	addr, err := netip.ParseAddr(p.opts.LBAddress)
	if d.Port == 0 || err != nil || addr.IsLoopback() || addr.IsUnspecified() {
		return nil
	}
	hostPort := net.JoinHostPort(p.opts.LBAddress, strconv.Itoa(d.Port))
	l, err := net.Listen("tcp", hostPort)
	if err != nil {
		return fmt.Errorf("%s: the discovery names alone are called on %s, and it cannot be listened on: %w; free the port, or give %s another port (0: the names answer on the listeners' ports only)", lbsync.PortFlag, hostPort, err, lbsync.PortFlag)
	}
	return l.Close()
}
