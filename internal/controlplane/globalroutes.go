package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"

	"golang.org/x/sync/errgroup"

	"herd.dev/herd/internal/global/dns"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/regionnet"
)

// DNSOptions run herd's authoritative DNS server inside the control plane (herd up --dns-zone).
type DNSOptions struct {
	// Zone is the zone served; empty runs no DNS server.
	Zone string
	// Listen is the UDP and TCP address. Default: 127.0.0.1:5353.
	Listen      string
	Nameservers []dns.Nameserver
	MaxUDPSize  int
	// Listener, when set, is used instead of opening Listen (tests pass one on port 0).
	Listener *dns.Listener
	// Discovery serves the discovery zone (dns.Options.Discovery): the fleets published to
	// each other's instances (herd up --discovery-zone, --discovery-listen).
	Discovery bool
}

// flag is the prefix of the herd up flags that set the options, for errors.
func (o DNSOptions) flag() string {
	if o.Discovery {
		return "--discovery-"
	}
	return "--dns-"
}

// lbAddresses gives each region's load balancer data address: the regional load balancer's for a
// region with a network of its own, else the address of herd up's embedded load balancer, which
// serves the regions that have none (a one-region fleet on one machine).
type lbAddresses struct {
	networks map[string]regionnet.Networks
	embedded []netip.Addr
}

func (a lbAddresses) RegionLBAddresses(ctx context.Context, region string) ([]netip.Addr, error) {
	for _, n := range a.networks {
		if addr, ok := n.DataAddress(ctx, region); ok {
			return []netip.Addr{addr}, nil
		}
	}
	return a.embedded, nil
}

// instanceLBAddresses gives the address the instances of a region reach its load balancer on:
// inside the region's network where it tells one (regionnet.InstanceSide); for a region without
// one, served by herd up's own load balancer, the host's address on the region's bridge when
// that load balancer listens on every address, since the loopback address clients use is the
// instance's own; else where clients reach it.
type instanceLBAddresses struct {
	lbAddresses
	// gateways are the providers that tell a region's bridge address (the local provider's);
	// nil when herd up's load balancer does not listen on every address.
	gateways []regionGateway
	// embeddedOnly skips the regions' networks: the addresses of herd up's own load balancer,
	// for the fleets no region's load balancer serves (embedded).
	embeddedOnly bool
}

// embedded gives where the instances of each region reach herd up's own load balancer, even in
// a region with a network of its own: a fleet in one region without options is served there
// only (regionlb.ServedRegionally), and its region's load balancer, if the region has one for
// other fleets, does not listen on its ports.
func (a instanceLBAddresses) embedded() instanceLBAddresses {
	a.embeddedOnly = true
	return a
}

// regionGateway tells the host's address on a region's bridge.
type regionGateway interface {
	RegionGateway(region string) (netip.Addr, bool)
}

// newInstanceLBAddresses reads which providers tell their regions' bridge addresses, used when
// herd up's load balancer listens on lbAddress, every address.
func newInstanceLBAddresses(lbs lbAddresses, providers map[string]provider.Provider, lbAddress string) instanceLBAddresses {
	a := instanceLBAddresses{lbAddresses: lbs}
	if addr, err := netip.ParseAddr(lbAddress); err != nil || !addr.IsUnspecified() {
		return a
	}
	for _, prov := range providers {
		if g, ok := prov.(regionGateway); ok {
			a.gateways = append(a.gateways, g)
		}
	}
	return a
}

func (a instanceLBAddresses) RegionLBAddresses(ctx context.Context, region string) ([]netip.Addr, error) {
	if a.embeddedOnly {
		for _, g := range a.gateways {
			if addr, ok := g.RegionGateway(region); ok {
				return []netip.Addr{addr}, nil
			}
		}
		return a.lbAddresses.embedded, nil
	}
	for _, n := range a.networks {
		if in, ok := n.(regionnet.InstanceSide); ok {
			if addr, ok := in.InstanceAddress(ctx, region); ok {
				return []netip.Addr{addr}, nil
			}
		}
	}
	for _, n := range a.networks {
		if _, ok := n.DataAddress(ctx, region); ok {
			return a.lbAddresses.RegionLBAddresses(ctx, region)
		}
	}
	return a.embedded().RegionLBAddresses(ctx, region)
}

// embeddedLBAddresses are the addresses clients reach herd up's own load balancer on: the
// --lb-address given, or loopback when it listens on every address.
func embeddedLBAddresses(lbAddress string) []netip.Addr {
	a, err := netip.ParseAddr(lbAddress)
	if err != nil || a.IsUnspecified() {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	}
	return []netip.Addr{a}
}

// dnsServer is herd's authoritative DNS server, answering from the routes.
type dnsServer struct {
	s     *dns.Server
	l     *dns.Listener
	table func(context.Context) (routes.Table, error)
	log   *slog.Logger
}

// listenDNS opens the DNS server's sockets; Start serves on them.
func listenDNS(opts DNSOptions, table func(context.Context) (routes.Table, error), events dns.EventRecorder, log *slog.Logger) (*dnsServer, error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:5353"
	}
	log = log.With("component", "dns", "discovery", opts.Discovery)
	s, err := dns.New(dns.Options{Zone: opts.Zone, Nameservers: opts.Nameservers, MaxUDPSize: opts.MaxUDPSize, Logger: log, Events: events, Discovery: opts.Discovery})
	if err != nil {
		return nil, fmt.Errorf("%szone: %w", opts.flag(), err)
	}
	l := opts.Listener
	if l == nil {
		if l, err = dns.Listen(opts.Listen); err != nil {
			return nil, fmt.Errorf("%slisten: %w", opts.flag(), err)
		}
	}
	if l.Addr().Addr().IsUnspecified() {
		log.Info("dns serving on every address of this host, its external interfaces included", "zone", s.Zone(), "listen", l.Addr().String())
	} else {
		log.Info("dns serving", "zone", s.Zone(), "listen", l.Addr().String())
	}
	return &dnsServer{s: s, l: l, table: table, log: log}, nil
}

// Start answers, following the routes, until ctx ends or the sockets fail; it closes them then.
func (d *dnsServer) Start(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		dns.Follow(gctx, d.s, d.table, routes.DefaultInterval, d.log)
		return nil
	})
	g.Go(func() error { return d.s.Serve(gctx, d.l) })
	return g.Wait()
}

// close closes the sockets, which Start has closed already if it ran.
func (d *dnsServer) close() { _ = d.l.Close() }

// discoveryDNSUser is a provider whose instances' cluster DNS forwards the discovery zone to
// herd's discovery DNS (the local provider's).
type discoveryDNSUser interface {
	SetDiscoveryDNS(local.DiscoveryDNS) error
}

// tellDiscovery tells the providers whose instances forward the discovery zone where herd's
// discovery DNS listens.
func tellDiscovery(providers map[string]provider.Provider, zone string, listen netip.AddrPort) error {
	listen = netip.AddrPortFrom(listen.Addr().Unmap(), listen.Port())
	for _, prov := range providers {
		if u, ok := prov.(discoveryDNSUser); ok {
			if err := u.SetDiscoveryDNS(local.DiscoveryDNS{Zone: zone, Listen: listen}); err != nil {
				return err
			}
		}
	}
	return nil
}
