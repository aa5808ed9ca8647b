package local

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"herd.dev/herd/internal/hostnet"
)

// ensureBridge creates the region's bridge with the gateway address, or completes it.
func ensureBridge(ctx context.Context, bridge, gatewayCIDR string) error {
	gateway, err := netip.ParsePrefix(gatewayCIDR)
	if err != nil {
		return fmt.Errorf("the bridge's gateway address: %w", err)
	}
	return hostnet.EnsureBridge(bridge, gateway)
}

// setupInstanceNetwork gives the instance its network namespace with eth0 on the region's bridge
// (host end hostVeth), its address, a default route through the bridge, and forwarding on.
func setupInstanceNetwork(ctx context.Context, r *record) error {
	ns := r.Netns
	addr, err := netip.ParseAddr(r.Address)
	if err != nil {
		return fmt.Errorf("set up the network of %s: address: %w", r.Spec.Name, err)
	}
	gateway, err := netip.ParseAddr(r.Gateway)
	if err != nil {
		return fmt.Errorf("set up the network of %s: gateway: %w", r.Spec.Name, err)
	}
	steps := []func() error{
		func() error { return hostnet.AddNetns(ns) },
		func() error { return hostnet.AddVeth(r.HostVeth, r.Bridge, "eth0", ns) },
		func() error { return hostnet.Address(ns, "eth0", netip.PrefixFrom(addr, r.PrefixLen)) },
		func() error { return hostnet.LinkUp(ns, "lo") },
		func() error { return hostnet.RouteVia(ns, gateway) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("set up the network of %s: %w", r.Spec.Name, err)
		}
	}
	if err := hostnet.InNetns(filepath.Join(hostnet.NetnsDir, ns), func() error {
		return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
	}); err != nil {
		return fmt.Errorf("set up the network of %s: enable forwarding in netns %s: %w", r.Spec.Name, ns, err)
	}
	return nil
}
