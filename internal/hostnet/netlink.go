package hostnet

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// The operations below speak rtnetlink through vishvananda/netlink rather than running ip: the
// kernel's errno comes back as it is (EEXIST, ENODEV ...), with no output to parse, and no
// process is started per step. ns names a namespace in NetnsDir; "" is the host's own.

// onLinks runs fn with a netlink handle whose socket lives in network namespace ns. The socket
// is opened on a thread inside ns (InNetns), so everything fn does, TUN devices included (made
// through /dev/net/tun on the calling thread, not through the socket), happens there.
func onLinks(ns string, fn func(h *netlink.Handle) error) error {
	run := func() error {
		h, err := netlink.NewHandle()
		if err != nil {
			return fmt.Errorf("netlink socket: %w", err)
		}
		defer h.Close()
		return fn(h)
	}
	if ns == "" {
		return run()
	}
	return InNetns(filepath.Join(NetnsDir, ns), run)
}

// where names a namespace in errors.
func where(ns string) string {
	if ns == "" {
		return "on the host"
	}
	return "in netns " + ns
}

// prefixNet converts a prefix to the net.IPNet netlink takes, keeping the host bits.
func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// AddNetns creates the named network namespace ns as `ip netns add` does. NetnsDir is made a
// shared mount point first, again as ip does, so that deleting a namespace's file also unmounts
// it in mount namespaces copied since (a container's), and the namespace is freed.
func AddNetns(ns string) error {
	if err := shareNetnsDir(); err != nil {
		return fmt.Errorf("add netns %s: %w", ns, err)
	}
	errc := make(chan error, 1)
	go func() {
		// NewNamed unshares the calling thread into the new namespace: take the thread back
		// before it returns to the scheduler, or never give it back (as InNetns does).
		runtime.LockOSThread()
		home, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer home.Close()
		created, err := netns.NewNamed(ns)
		if err == nil {
			created.Close()
		}
		if netns.Set(home) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("add netns %s: %w", ns, err)
	}
	return nil
}

// shareNetnsDir makes NetnsDir a mount point with shared propagation, binding it onto itself the
// first time.
func shareNetnsDir() error {
	if err := os.MkdirAll(NetnsDir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if !errors.Is(err, unix.EINVAL) {
		return err // nil, or a failure a bind mount would not cure
	}
	if err := unix.Mount(NetnsDir, NetnsDir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind %s onto itself: %w", NetnsDir, err)
	}
	return unix.Mount("", NetnsDir, "none", unix.MS_SHARED|unix.MS_REC, "")
}

// removeNetns unmounts and removes the named network namespace's file, as `ip netns delete` does.
func removeNetns(ns string) error {
	if err := netns.DeleteNamed(ns); err != nil {
		return fmt.Errorf("delete netns %s: %w", ns, err)
	}
	return nil
}

// EnsureBridge creates the host bridge name if missing, gives it the gateway address and brings
// it up.
func EnsureBridge(name string, gateway netip.Prefix) error {
	return onLinks("", func(h *netlink.Handle) error {
		err := h.LinkAdd(&netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: name}})
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create bridge %s: %w", name, err)
		}
		br, err := h.LinkByName(name)
		if err != nil {
			return fmt.Errorf("bridge %s: %w", name, err)
		}
		if err := h.AddrReplace(br, &netlink.Addr{IPNet: prefixNet(gateway)}); err != nil {
			return fmt.Errorf("address bridge %s with %s: %w", name, gateway, err)
		}
		if err := h.LinkSetUp(br); err != nil {
			return fmt.Errorf("bring bridge %s up: %w", name, err)
		}
		return nil
	})
}

// AddVeth creates a veth pair: host on the host, plugged into bridge and up, and peer inside
// network namespace peerNs (left down: the caller addresses it first).
func AddVeth(host, bridge, peer, peerNs string) error {
	target, err := netns.GetFromPath(filepath.Join(NetnsDir, peerNs))
	if err != nil {
		return fmt.Errorf("netns %s: %w", peerNs, err)
	}
	defer target.Close()
	return onLinks("", func(h *netlink.Handle) error {
		veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: host}, PeerName: peer, PeerNamespace: netlink.NsFd(target)}
		if err := h.LinkAdd(veth); err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("create veth %s with %s in netns %s: %w", host, peer, peerNs, err)
		}
		link, err := h.LinkByName(host)
		if err != nil {
			return fmt.Errorf("veth %s: %w", host, err)
		}
		br, err := h.LinkByName(bridge)
		if err != nil {
			return fmt.Errorf("bridge %s: %w", bridge, err)
		}
		if err := h.LinkSetMaster(link, br); err != nil {
			return fmt.Errorf("plug %s into bridge %s: %w", host, bridge, err)
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("bring %s up: %w", host, err)
		}
		return nil
	})
}

// Address gives dev in ns the address addr (replacing it if present) and brings dev up.
func Address(ns, dev string, addr netip.Prefix) error {
	return address(ns, dev, &netlink.Addr{IPNet: prefixNet(addr)})
}

// PointToPoint gives dev in ns the local address with peer on the other end (both /32), as
// `ip addr replace LOCAL peer PEER` does, and brings dev up.
func PointToPoint(ns, dev string, local, peer netip.Addr) error {
	return address(ns, dev, &netlink.Addr{
		IPNet: prefixNet(netip.PrefixFrom(local, local.BitLen())),
		Peer:  prefixNet(netip.PrefixFrom(peer, peer.BitLen())),
	})
}

func address(ns, dev string, addr *netlink.Addr) error {
	return onLinks(ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("%s %s: %w", dev, where(ns), err)
		}
		if err := h.AddrReplace(link, addr); err != nil {
			return fmt.Errorf("address %s %s with %s: %w", dev, where(ns), addr.IPNet, err)
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("bring %s up %s: %w", dev, where(ns), err)
		}
		return nil
	})
}

// RemoveAddress removes addr from dev in ns; an address already gone is not an error.
func RemoveAddress(ns, dev string, addr netip.Prefix) error {
	return onLinks(ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("%s %s: %w", dev, where(ns), err)
		}
		err = h.AddrDel(link, &netlink.Addr{IPNet: prefixNet(addr)})
		if err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return fmt.Errorf("remove %s from %s %s: %w", addr, dev, where(ns), err)
		}
		return nil
	})
}

// FlushAddresses removes every IPv4 address of dev in ns.
func FlushAddresses(ns, dev string) error {
	return onLinks(ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("%s %s: %w", dev, where(ns), err)
		}
		addrs, err := h.AddrList(link, netlink.FAMILY_V4)
		if err != nil {
			return fmt.Errorf("addresses of %s %s: %w", dev, where(ns), err)
		}
		for _, a := range addrs {
			if err := h.AddrDel(link, &a); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
				return fmt.Errorf("remove %s from %s %s: %w", a.IPNet, dev, where(ns), err)
			}
		}
		return nil
	})
}

// LinkUp brings dev in ns up.
func LinkUp(ns, dev string) error {
	return onLinks(ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("%s %s: %w", dev, where(ns), err)
		}
		if err := h.LinkSetUp(link); err != nil {
			return fmt.Errorf("bring %s up %s: %w", dev, where(ns), err)
		}
		return nil
	})
}

// RemoveLink deletes dev in ns; a link already gone is not an error.
func RemoveLink(ns, dev string) error {
	return onLinks(ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(dev)
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s %s: %w", dev, where(ns), err)
		}
		if err := h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return fmt.Errorf("delete %s %s: %w", dev, where(ns), err)
		}
		return nil
	})
}

// HasLink reports whether network namespace ns has an interface dev.
func HasLink(ns, dev string) bool {
	return onLinks(ns, func(h *netlink.Handle) error {
		_, err := h.LinkByName(dev)
		return err
	}) == nil
}

// RouteVia makes gw the default gateway of ns.
func RouteVia(ns string, gw netip.Addr) error {
	return RouteNetVia(ns, netip.PrefixFrom(netip.IPv4Unspecified(), 0), gw)
}

// RouteNetVia routes dst through gw in ns, as `ip route replace DST via GW` does.
func RouteNetVia(ns string, dst netip.Prefix, gw netip.Addr) error {
	return onLinks(ns, func(h *netlink.Handle) error {
		r := &netlink.Route{Dst: prefixNet(dst), Gw: gw.AsSlice()}
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s via %s %s: %w", dst, gw, where(ns), err)
		}
		return nil
	})
}

// RouteDev routes dst (the default route when dst is not valid) straight out of dev in ns, with
// link scope, as `ip route replace DST dev DEV` does.
func RouteDev(ns string, dst netip.Prefix, dev string) error {
	if !dst.IsValid() {
		dst = netip.PrefixFrom(netip.IPv4Unspecified(), 0)
	}
	return onLinks(ns, func(h *netlink.Handle) error {
		link, err := h.LinkByName(dev)
		if err != nil {
			return fmt.Errorf("%s %s: %w", dev, where(ns), err)
		}
		r := &netlink.Route{Dst: prefixNet(dst), LinkIndex: link.Attrs().Index, Scope: netlink.SCOPE_LINK}
		if err := h.RouteReplace(r); err != nil {
			return fmt.Errorf("route %s dev %s %s: %w", dst, dev, where(ns), err)
		}
		return nil
	})
}

// EnsureTun creates a persistent TUN device dev (no packet information, as `ip tuntap add mode
// tun` makes it) in ns unless it is there; the process that relays it attaches later.
func EnsureTun(ns, dev string) error {
	return onLinks(ns, func(h *netlink.Handle) error {
		if _, err := h.LinkByName(dev); err == nil {
			return nil
		}
		tun := &netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: dev}, Mode: netlink.TUNTAP_MODE_TUN, Flags: netlink.TUNTAP_NO_PI}
		err := h.LinkAdd(tun)
		for _, f := range tun.Fds {
			f.Close() // persistent: the device outlives the file that made it
		}
		if err != nil {
			return fmt.Errorf("create TUN device %s %s: %w", dev, where(ns), err)
		}
		return nil
	})
}
