package local

import (
	"fmt"
	"net/netip"

	"herd.dev/herd/internal/hostnet"
)

// DiscoveryDNS is herd's discovery DNS (spec.discovery) as the control plane serves it: every
// instance created afterwards has its cluster DNS forward Zone there (herd-agent's
// --discovery-zone and --discovery-dns). An instance's queries reach it from the instance's own
// address, which tells herd the calling fleet and region.
type DiscoveryDNS struct {
	// Zone is the discovery zone, e.g. "herd.internal.".
	Zone string
	// Listen is where the DNS listens. An unspecified address (0.0.0.0:PORT) is every address
	// of the host, which each instance reaches at its bridge's address, its gateway: inside
	// its region, whichever region it is in, without crossing a router.
	Listen netip.AddrPort
}

// SetDiscoveryDNS tells the provider where herd's discovery DNS listens, for the instances
// created from now on. A loopback address is refused: no instance reaches the host's.
func (p *Provider) SetDiscoveryDNS(d DiscoveryDNS) error {
	if a := d.Listen.Addr(); !d.Listen.IsValid() || a.IsLoopback() || !a.Is4() && !a.IsUnspecified() {
		return fmt.Errorf("--discovery-listen %s: the instances cannot reach it: listen on 0.0.0.0:PORT (each instance then asks its bridge's address) or on an IPv4 address of this host", d.Listen)
	}
	p.discovery.Store(&d)
	return nil
}

// discoveryFlags are the agent's flags that forward the discovery zone, for an instance whose
// gateway is gateway; none while no discovery DNS is served.
func (p *Provider) discoveryFlags(gateway string) []string {
	d := p.discovery.Load()
	if d == nil {
		return nil
	}
	server := d.Listen
	if server.Addr().IsUnspecified() {
		gw, err := netip.ParseAddr(gateway)
		if err != nil {
			return nil
		}
		server = netip.AddrPortFrom(gw, d.Listen.Port())
	}
	return []string{"--discovery-zone", d.Zone, "--discovery-dns", server.String()}
}

// RegionGateway is the host's address on region's bridge: where the region's instances reach
// this host, and so herd up's own load balancer when it listens on every address. ok is false
// while the region has no subnet yet (no instance was ever given an address in it).
func (p *Provider) RegionGateway(region string) (netip.Addr, bool) {
	regions, err := readRegions(p.regionsDir())
	if err != nil || regions[region] == nil {
		return netip.Addr{}, false
	}
	subnet, err := netip.ParsePrefix(regions[region].Subnet)
	if err != nil {
		return netip.Addr{}, false
	}
	return hostnet.HostAddr(subnet, gatewayHost), true
}
