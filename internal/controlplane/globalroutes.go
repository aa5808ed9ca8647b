package controlplane

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/dns"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/store"
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
}

// dnsRefresh is how often the in-process DNS server recomputes its routes from the store: a
// region that turns unhealthy leaves the answers within this plus the health checkers' own
// detection time (1.5 to 2.5 s), inside the 3 s herd promises.
const dnsRefresh = 250 * time.Millisecond

// routeSource computes the routes table from the store and the regions' state.
type routeSource struct {
	store store.Store
	lb    routes.LBAddresses
	reach routes.Reachability
	rtt   routes.RTTSource
}

// Table is the routes now: every fleet with spec.global, its Ready instances per region, each
// region's load balancer address, reachability and the measured round-trip times.
func (r *routeSource) Table(ctx context.Context) (routes.Table, error) {
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, r.store, store.Fleets)
	if err != nil {
		return routes.Table{}, fmt.Errorf("listing fleets: %w", err)
	}
	global := fleets[:0]
	for _, f := range fleets {
		if f.Spec.Global != nil {
			global = append(global, f)
		}
	}
	var insts []*v1alpha1.Instance
	if len(global) > 0 {
		if insts, _, err = store.ListObjects[v1alpha1.Instance](ctx, r.store, store.Instances); err != nil {
			return routes.Table{}, fmt.Errorf("listing instances: %w", err)
		}
	}
	return routes.Compute(ctx, routes.Inputs{Fleets: global, Instances: insts, LB: r.lb, Reach: r.reach, RTT: r.rtt}), nil
}

// regionNetworks is the local provider's record of its regions' networks: a region's load
// balancer serves clients on the router's internet (WAN) address.
type regionNetworks interface {
	Region(region string) (local.RegionNetwork, error)
}

// lbAddresses gives each region's load balancer data address: the regional load balancer's for a
// region with a network of its own, else the address of herd up's embedded load balancer, which
// serves the regions that have none (a one-region fleet on one machine).
type lbAddresses struct {
	providers map[string]provider.Provider
	embedded  []netip.Addr
}

func (a lbAddresses) RegionLBAddresses(_ context.Context, region string) ([]netip.Addr, error) {
	for _, p := range a.providers {
		if nets, ok := p.(regionNetworks); ok {
			if rn, err := nets.Region(region); err == nil && rn.WANAddress.IsValid() {
				return []netip.Addr{rn.WANAddress}, nil
			}
		}
	}
	return a.embedded, nil
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

// startDNS opens the DNS server's sockets; serve runs it, following the routes, until ctx ends.
func startDNS(opts DNSOptions, src *routeSource, events dns.EventRecorder, log *slog.Logger) (serve func(context.Context) error, err error) {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:5353"
	}
	log = log.With("component", "dns")
	s, err := dns.New(dns.Options{Zone: opts.Zone, Nameservers: opts.Nameservers, MaxUDPSize: opts.MaxUDPSize, Logger: log, Events: events})
	if err != nil {
		return nil, fmt.Errorf("--dns-zone: %w", err)
	}
	l := opts.Listener
	if l == nil {
		if l, err = dns.Listen(opts.Listen); err != nil {
			return nil, fmt.Errorf("--dns-listen: %w", err)
		}
	}
	log.Info("dns serving", "zone", s.Zone(), "listen", l.Addr().String())
	return func(ctx context.Context) error {
		go dns.Follow(ctx, s, src.Table, dnsRefresh, log)
		return s.Serve(ctx, l)
	}, nil
}
