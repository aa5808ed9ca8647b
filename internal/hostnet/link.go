package hostnet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"herd.dev/herd/internal/hostproc"
)

// LockPath is the host-wide lock that serialises subnet choice and bridge creation across every
// herd data directory.
const LockPath = "/run/herd-local-provider.lock"

// ShortHash returns the first n hex digits of s's SHA-256: host-wide names (interfaces have at
// most 15 bytes) derived from longer ones, the same in every process.
func ShortHash(s string, n int) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])[:n]
}

// LinkExists reports whether a network interface of the host has this name.
func LinkExists(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

// DeleteLink deletes a host interface if it exists and waits until it is gone.
func DeleteLink(ctx context.Context, name string) error {
	if !LinkExists(name) {
		return nil
	}
	if err := RemoveLink("", name); err != nil && LinkExists(name) {
		return fmt.Errorf("delete link: %w", err)
	}
	return hostproc.WaitFor(ctx, 5*time.Second, func() bool { return !LinkExists(name) }, "link "+name+" to disappear")
}

// EnsureNetns creates a network namespace with its loopback up, and forwarding on if asked.
func EnsureNetns(ctx context.Context, ns string, forward bool) error {
	if !NetnsExists(ns) {
		if err := AddNetns(ns); err != nil && !NetnsExists(ns) {
			return err
		}
	}
	if err := LinkUp(ns, "lo"); err != nil {
		return err
	}
	if forward {
		if err := InNetns(filepath.Join(NetnsDir, ns), func() error {
			return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1\n"), 0o644)
		}); err != nil {
			return fmt.Errorf("enable forwarding in netns %s: %w", ns, err)
		}
	}
	return nil
}

// Forward turns IPv4 forwarding on for the packets that come in on dev, a device of the host
// (net.ipv4.conf.DEV.forwarding), and on no other device: the host's own setting
// (net.ipv4.ip_forward) stays as it is.
func Forward(dev string) error {
	if err := os.WriteFile(filepath.Join("/proc/sys/net/ipv4/conf", dev, "forwarding"), []byte("1\n"), 0o644); err != nil {
		return fmt.Errorf("forwarding on %s: %w", dev, err)
	}
	return nil
}

// DeleteNetns deletes a network namespace (with every interface and iptables rule inside), then
// its host veth hostVeth ("" for none) if the kernel has not removed it yet.
func DeleteNetns(ctx context.Context, ns, hostVeth string) error {
	if NetnsExists(ns) {
		if err := removeNetns(ns); err != nil && NetnsExists(ns) {
			return err
		}
	}
	// The kernel destroys a namespace in the background: remove the veth pair now.
	if err := DeleteLink(ctx, hostVeth); err != nil {
		return err
	}
	return nil
}

// NetnsInode returns the inode of the network namespace bound at /run/netns/<ns>, 0 if none.
func NetnsInode(ns string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(NetnsDir, ns), &st); err != nil {
		return 0
	}
	if st.Dev == 0 {
		return 0
	}
	var fsst unix.Statfs_t
	if err := unix.Statfs(filepath.Join(NetnsDir, ns), &fsst); err != nil || fsst.Type != unix.NSFS_MAGIC {
		return 0 // a stale file, not a bound namespace
	}
	return st.Ino
}

// KillNetns kills every process in network namespace ns.
func KillNetns(ctx context.Context, ns string) error {
	ino := NetnsInode(ns)
	if ino == 0 {
		return nil
	}
	return hostproc.KillAll(ctx, 10*time.Second, "every process of network namespace "+ns, func() map[int]bool {
		return hostproc.Matching(func(pid int) bool { return hostproc.InNetns(pid, ino) })
	})
}
