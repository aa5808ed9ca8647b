// What the control plane uses of the lab: regionnet.Networks (the regions' networks with their
// load balancers, the front door, dialing from the clients' side, chaos).

package netlab

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/regionnet"
)

var (
	_ regionnet.Networks     = (*Lab)(nil)
	_ regionnet.InstanceSide = (*Lab)(nil)
)

// EnsureRegion implements regionnet.Networks: EnsureNetwork with the region's options, then
// EnsureRegionLB.
func (l *Lab) EnsureRegion(ctx context.Context, region string, options map[string]string) (regionnet.Region, error) {
	if _, err := l.EnsureNetwork(ctx, region, options); err != nil {
		return regionnet.Region{}, err
	}
	lb, err := l.EnsureRegionLB(ctx, region)
	if err != nil {
		return regionnet.Region{}, err
	}
	return regionnet.Region{Region: region, DataAddress: lb.DataAddress, AdminURL: lb.AdminURL, TokenFile: lb.TokenFile}, nil
}

// DataAddress implements regionnet.Networks: the router's internet (WAN) address, where the
// region's load balancer serves clients.
func (l *Lab) DataAddress(_ context.Context, region string) (netip.Addr, bool) {
	rn, err := l.Region(region)
	return rn.WANAddress, err == nil && rn.WANAddress.IsValid()
}

// InstanceAddress implements regionnet.InstanceSide: the router's address on the region's
// bridge, where the region's instances reach its load balancer without crossing the shaped link.
func (l *Lab) InstanceAddress(_ context.Context, region string) (netip.Addr, bool) {
	rn, err := l.Region(region)
	return rn.LANAddress, err == nil && rn.LANAddress.IsValid()
}

// EnsureFrontDoor implements regionnet.Networks with EnsureFront: the front door in the internet
// namespace, its admin API on a Unix socket.
func (l *Lab) EnsureFrontDoor(ctx context.Context) (regionnet.FrontDoor, error) {
	f, err := l.EnsureFront(ctx)
	if err != nil {
		return regionnet.FrontDoor{}, err
	}
	return regionnet.FrontDoor{DataAddress: f.DataAddress, AdminURL: f.AdminURL, HTTP: f.AdminClient(), TokenFile: f.TokenFile}, nil
}

// RemoveFrontDoor implements regionnet.Networks with RemoveFront.
func (l *Lab) RemoveFrontDoor(ctx context.Context) error { return l.RemoveFront(ctx) }

// DialFromClients dials from the internet namespace, where every region's link and every client
// network meets, so that a region's partition or degradation applies to the connection as to
// any client's. The socket is made on a thread that entered the namespace (the kernel binds a
// socket to its creator's namespace for good); the thread is then thrown away rather than
// trusted back into the host's namespace.
func (l *Lab) DialFromClients(ctx context.Context, network, address string) (net.Conn, error) {
	ns := internetNetns(l.opts.DataDir)
	if !hostnet.NetnsExists(ns) {
		return nil, fmt.Errorf("dial %s from the clients' side: the internet namespace %s does not exist (no region network yet)", address, ns)
	}
	return hostnet.DialInNetns(ctx, ns, network, address)
}
