package local

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"herd.dev/herd/internal/hostnet"
)

// run runs a command and returns an error naming the command and its output when it fails.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// linkExists reports whether a network interface of the host has this name.
func linkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// ensureBridge creates the region's bridge with the gateway address, or completes it.
func ensureBridge(ctx context.Context, bridge, gatewayCIDR string) error {
	if !linkExists(bridge) {
		if err := run(ctx, "ip", "link", "add", bridge, "type", "bridge"); err != nil && !linkExists(bridge) {
			return fmt.Errorf("create bridge: %w", err)
		}
	}
	if err := run(ctx, "ip", "addr", "replace", gatewayCIDR, "dev", bridge); err != nil {
		return fmt.Errorf("address the bridge: %w", err)
	}
	if err := run(ctx, "ip", "link", "set", bridge, "up"); err != nil {
		return fmt.Errorf("bring the bridge up: %w", err)
	}
	return nil
}

// deleteLink deletes a host interface if it exists and waits until it is gone.
func deleteLink(ctx context.Context, name string) error {
	if !linkExists(name) {
		return nil
	}
	if err := run(ctx, "ip", "link", "delete", name); err != nil && linkExists(name) {
		return fmt.Errorf("delete link: %w", err)
	}
	return waitFor(ctx, 5*time.Second, func() bool { return !linkExists(name) }, "link "+name+" to disappear")
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
		if err := run(ctx, "ip", s...); err != nil {
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

// deleteNetns deletes the instance's network namespace (with eth0, cni0, pod veths and every
// iptables rule inside), then its host veth if the kernel has not removed it yet.
func deleteNetns(ctx context.Context, ns, hostVeth string) error {
	if hostnet.NetnsExists(ns) {
		if err := run(ctx, "ip", "netns", "delete", ns); err != nil && hostnet.NetnsExists(ns) {
			return fmt.Errorf("delete netns: %w", err)
		}
	}
	// The kernel destroys a namespace in the background: remove the veth pair now.
	if err := deleteLink(ctx, hostVeth); err != nil {
		return err
	}
	return nil
}

// netnsInode returns the inode of the network namespace bound at /run/netns/<ns>, 0 if none.
func netnsInode(ns string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(hostnet.NetnsDir, ns), &st); err != nil {
		return 0
	}
	if st.Dev == 0 {
		return 0
	}
	var fsst unix.Statfs_t
	if err := unix.Statfs(filepath.Join(hostnet.NetnsDir, ns), &fsst); err != nil || fsst.Type != unix.NSFS_MAGIC {
		return 0 // a stale file, not a bound namespace
	}
	return st.Ino
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool, what string) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
	return nil
}
