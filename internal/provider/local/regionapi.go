// What the control plane uses of the local provider's regions: their networks
// (regionnet.Networks: the regional load balancers, the front door, dialing from the clients'
// side, chaos), and killing an instance.

package local

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/regionnet"
)

var (
	_ provider.RegionNetworks = (*Provider)(nil)
	_ provider.InstanceKiller = (*Provider)(nil)
	_ regionnet.Networks      = networks{}
)

// RegionNetworks implements provider.RegionNetworks: the regions' networks on this host.
func (p *Provider) RegionNetworks() regionnet.Networks { return networks{p} }

// networks is the provider's regions' networks, as regionnet.Networks: chaos and
// DialFromClients are the provider's own.
type networks struct{ *Provider }

// EnsureRegion is the provider's EnsureRegion with the region's options, then EnsureRegionLB.
func (n networks) EnsureRegion(ctx context.Context, region string, options map[string]string) (regionnet.Region, error) {
	if _, err := n.Provider.EnsureRegion(ctx, region, options); err != nil {
		return regionnet.Region{}, err
	}
	lb, err := n.Provider.EnsureRegionLB(ctx, region)
	if err != nil {
		return regionnet.Region{}, err
	}
	return regionnet.Region{Region: region, DataAddress: lb.DataAddress, AdminURL: lb.AdminURL, TokenFile: lb.TokenFile}, nil
}

// DataAddress is the router's internet (WAN) address, where the region's load balancer serves
// clients.
func (n networks) DataAddress(_ context.Context, region string) (netip.Addr, bool) {
	rn, err := n.Provider.Region(region)
	return rn.WANAddress, err == nil && rn.WANAddress.IsValid()
}

// EnsureFrontDoor is EnsureFront: the front door in the internet namespace, its admin API on a
// Unix socket.
func (n networks) EnsureFrontDoor(ctx context.Context) (regionnet.FrontDoor, error) {
	f, err := n.Provider.EnsureFront(ctx)
	if err != nil {
		return regionnet.FrontDoor{}, err
	}
	return regionnet.FrontDoor{DataAddress: f.DataAddress, AdminURL: f.AdminURL, HTTP: f.AdminClient(), TokenFile: f.TokenFile}, nil
}

// RemoveFrontDoor is RemoveFront.
func (n networks) RemoveFrontDoor(ctx context.Context) error { return n.Provider.RemoveFront(ctx) }

// DialFromClients dials from the internet namespace, where every region's link and every client
// network meets, so that a region's partition or degradation applies to the connection as to
// any client's. The socket is made on a thread that entered the namespace (the kernel binds a
// socket to its creator's namespace for good); the thread is then thrown away rather than
// trusted back into the host's namespace.
func (p *Provider) DialFromClients(ctx context.Context, network, address string) (net.Conn, error) {
	ns := internetNetns(p.opts.DataDir)
	if !hostnet.NetnsExists(ns) {
		return nil, fmt.Errorf("dial %s from the clients' side: the internet namespace %s does not exist (no region network yet)", address, ns)
	}
	var conn net.Conn
	err := hostnet.InNetns(filepath.Join(hostnet.NetnsDir, ns), func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		conn = c
		return err
	})
	return conn, err
}

// KillInstance implements provider.InstanceKiller: SIGKILL to every process of the instance (its
// agent, its Kubernetes, its pods), as a crash of its machine would; the record and the
// instance's resources stay, and the instance reads Failed (its agent is gone) until Delete.
func (p *Provider) KillInstance(ctx context.Context, name string) error {
	if !provider.ValidName(name) {
		return fmt.Errorf("kill instance %q: %w", name, provider.ErrNotFound)
	}
	dir := p.InstanceDir(name)
	rec, err := readRecord(dir)
	if err != nil {
		return fmt.Errorf("kill instance %s: %w", name, err)
	}
	if rec == nil {
		return fmt.Errorf("kill instance %s: %w", name, provider.ErrNotFound)
	}
	ns, root := netnsName(name), cgroupRootOf(name)
	if rec.Netns != "" {
		ns = rec.Netns
	}
	if rec.CgroupRoot != "" {
		root = rec.CgroupRoot
	}
	hier, err := cgroupHierarchies()
	if err != nil {
		return err
	}
	if err := killAll(ctx, hier, root, hostnet.NetnsInode(ns), dir, 15*time.Second); err != nil {
		return fmt.Errorf("kill instance %s: %w", name, err)
	}
	p.log.Warn("instance killed (SIGKILL of every process)", "instance", name)
	return nil
}
