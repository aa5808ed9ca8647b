package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"herd.dev/herd/internal/hostnet"
)

// ensureBridge creates the region's bridge with the gateway address, or completes it.
func ensureBridge(ctx context.Context, bridge, gatewayCIDR string) error {
	if !hostnet.LinkExists(bridge) {
		if err := hostnet.IP(ctx, "link", "add", bridge, "type", "bridge"); err != nil && !hostnet.LinkExists(bridge) {
			return fmt.Errorf("create bridge: %w", err)
		}
	}
	if err := hostnet.IP(ctx, "addr", "replace", gatewayCIDR, "dev", bridge); err != nil {
		return fmt.Errorf("address the bridge: %w", err)
	}
	if err := hostnet.IP(ctx, "link", "set", bridge, "up"); err != nil {
		return fmt.Errorf("bring the bridge up: %w", err)
	}
	return nil
}

// setupInstanceNetwork gives the instance its network namespace with eth0 on the region's bridge
// (host end hostVeth), its address, a default route through the bridge, and forwarding on.
func setupInstanceNetwork(ctx context.Context, r *record) error {
	ns := r.Netns
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", r.HostVeth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", r.HostVeth, "master", r.Bridge, "up"},
		{"-n", ns, "addr", "add", fmt.Sprintf("%s/%d", r.Address, r.PrefixLen), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "route", "add", "default", "via", r.Gateway},
	}
	for _, s := range steps {
		if err := hostnet.IP(ctx, s...); err != nil {
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
