package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// forgetGonePodsHere runs forgetGonePods on the pod bridge of the agent's network namespace,
// which is the instance's.
func forgetGonePodsHere(ctx context.Context, log *slog.Logger) error {
	ns, err := netns.Get()
	if err != nil {
		return fmt.Errorf("this network namespace: %w", err)
	}
	defer ns.Close()
	return forgetGonePods(ctx, ns, podBridge, log)
}

// forgetGonePods keeps the pod bridge's neighbour (ARP) table from sending to pods that are gone,
// until ctx ends: each time a link of the namespace ns is deleted (a pod's veth goes with its
// sandbox), it deletes the bridge's learned IPv4 neighbours.
//
// Why: host-local hands out the pod range round-robin, so after a few hundred pods a new pod
// gets the address of one that is gone. The kernel keeps a neighbour entry while it has room
// (below gc_thresh1, 128 entries, none is collected), so the node's own traffic to the new pod
// (the kubelet's probes, kube-proxy's Services) went to the old pod's MAC address and was lost
// until the entry was probed again: 5 s and more, longer than a probe's timeout. A pod that
// speaks first fixes the entry with its own ARP request; one that only listens, as a liveness
// probe's target, does not, and was restarted. The bridge plugin sends no gratuitous ARP for a
// new pod, and the kernel flushes the table by itself only when the bridge's own address changes.
// Deleting every learned entry costs the pods still there one ARP exchange each on their next
// packet from the node.
func forgetGonePods(ctx context.Context, ns netns.NsHandle, bridge string, log *slog.Logger) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink socket: %w", err)
	}
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	err = netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		Namespace:     &ns,
		ErrorCallback: func(err error) { log.Warn("watching links for pods that go", "err", err) },
	})
	if err != nil {
		h.Close()
		return fmt.Errorf("watching links: %w", err)
	}
	go func() {
		defer h.Close()
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					return
				}
				if u.Header.Type != unix.RTM_DELLINK {
					continue
				}
				if err := forgetNeighbours(h, bridge); err != nil {
					log.Warn("forgetting the neighbours of pods that went", "bridge", bridge, "err", err)
				}
			}
		}
	}()
	return nil
}

// forgetNeighbours deletes bridge's IPv4 neighbour entries that the kernel learned (not those
// set by hand or needing no ARP). A bridge that does not exist yet has none.
func forgetNeighbours(h *netlink.Handle, bridge string) error {
	link, err := h.LinkByName(bridge)
	if errors.As(err, new(netlink.LinkNotFoundError)) {
		return nil
	}
	if err != nil {
		return err
	}
	neighbours, err := h.NeighList(link.Attrs().Index, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	for _, n := range neighbours {
		if n.State&(netlink.NUD_PERMANENT|netlink.NUD_NOARP) != 0 {
			continue
		}
		if err := h.NeighDel(&n); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("deleting %s: %w", n.IP, err)
		}
	}
	return nil
}
