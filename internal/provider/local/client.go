// Client networks: namespaces linked to the internet namespace, where clients (tests, load
// generators, DNS resolvers) run as users somewhere on the internet would, each network with
// its own shaped link (its distance to the internet, added to every region's).

package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/statefile"
)

const clientFile = "client.json"

// ClientNetwork is a client network namespace on the internet.
type ClientNetwork struct {
	Name string `json:"name"`
	// Netns is the client's network namespace (/run/netns/<Netns>): run clients in it with
	// `ip netns exec <Netns> ...` or nsenter --net=/run/netns/<Netns>.
	Netns string `json:"netns"`
	// Address is the client's address on the internet: the .1 of Network.
	Address string `json:"address"`
	// Network is the /24 of the internet pool that is the client network's own, routed to it by
	// the internet namespace: load balancers that aggregate clients per /24 (GET /rtt) see each
	// client network apart. Other addresses of it can be added in the namespace (on lo).
	Network string `json:"network"`
	// Shape is its link's shape: its distance to the internet, added to every region's.
	Shape netlab.Shape `json:"shape"`
	// RegionLatency adds round-trip time between this client network and some regions, by
	// region name: clients in different places are not equally far from every region.
	RegionLatency map[string]time.Duration `json:"regionLatency,omitempty"`
	// The link relay's pid and start time.
	RelayPID   int    `json:"relayPid,omitempty"`
	RelayStart uint64 `json:"relayStart,omitempty"`
}

// clientNetns is the namespace of the client network name of a data directory.
func clientNetns(dataDir, name string) string {
	return "herdcl-" + hostnet.ShortHash(dataDir+"\x00"+name, 8)
}

func (p *Provider) clientDir(name string) string { return filepath.Join(p.netDir(), "clients", name) }

// ClientNetns returns the name of the network namespace of client network name.
func (p *Provider) ClientNetns(name string) string { return clientNetns(p.opts.DataDir, name) }

// AddClient makes (or repairs, or reshapes) a client network on the internet: a namespace with
// one link to the internet namespace, shaped as shape says, with regionLatency (region name ->
// round trip) more to some regions, and a default route through it.
func (p *Provider) AddClient(ctx context.Context, name string, shape netlab.Shape, regionLatency map[string]time.Duration) (ClientNetwork, error) {
	if !labelRE.MatchString(name) || len(name) > 63 {
		return ClientNetwork{}, fmt.Errorf("client network %q: the name must be a DNS label", name)
	}
	var out ClientNetwork
	err := p.withProviderLock(func() error {
		inet, err := p.ensureInternet(ctx)
		if err != nil {
			return err
		}
		network, err := p.internetNetwork(inet, "client/"+name)
		if err != nil {
			return err
		}
		dir := p.clientDir(name)
		c, err := readClient(dir)
		if err != nil {
			return err
		}
		if c == nil {
			c = &ClientNetwork{Name: name}
		}
		addr := hostnet.HostAddr(network, clientHost).String()
		moved := c.Address != "" && c.Address != addr
		c.Netns, c.Address, c.Network, c.Shape, c.RegionLatency = clientNetns(p.opts.DataDir, name), addr, network.String(), shape, regionLatency
		if err := writeClient(dir, c); err != nil {
			return err
		}
		if err := hostnet.EnsureNetns(ctx, c.Netns, false); err != nil {
			return err
		}
		if moved {
			// Made when client networks shared the internet's /24: its old address goes.
			if err := p.flushClientLink(ctx, c, inet); err != nil {
				return err
			}
		}
		if err := ensureLinkDevices(ctx, p.clientLink(c, inet)); err != nil {
			return err
		}
		if err := p.syncClientRelay(c, inet); err != nil {
			return err
		}
		out = *c
		return nil
	})
	if err != nil {
		return ClientNetwork{}, fmt.Errorf("client network %s: %w", name, err)
	}
	return out, nil
}

// clientLink is the client network's link: its eth0 to the internet's hub device, with the extra
// latency to each region that has an address on the internet.
func (p *Provider) clientLink(c *ClientNetwork, inet *internetRecord) link {
	sn, _ := netip.ParsePrefix(inet.Subnet)
	addr, _ := netip.ParseAddr(c.Address)
	network, _ := netip.ParsePrefix(c.Network)
	cfg := netlab.LinkConfig{
		Name:  "client " + c.Name,
		A:     netlab.LinkEnd{Netns: c.Netns, Device: "eth0"},
		B:     netlab.LinkEnd{Netns: inet.Netns, Device: hubDevice(p.opts.DataDir, "client/"+c.Name)},
		Shape: c.Shape,
	}
	for region, d := range c.RegionLatency {
		if h, ok := inet.Hosts["region/"+region]; ok {
			if cfg.PeerLatency == nil {
				cfg.PeerLatency = map[netip.Addr]time.Duration{}
			}
			cfg.PeerLatency[hostnet.HostAddr(sn, h)] = d
		}
	}
	return link{cfg: cfg, addrA: addr, hub: hostnet.HostAddr(sn, hubHost), defaultRoute: true, networkA: network}
}

// flushClientLink removes every address of the client network's link, at both ends, and the
// address the internet record held for it, before the link gets its addresses again.
func (p *Provider) flushClientLink(ctx context.Context, c *ClientNetwork, inet *internetRecord) error {
	l := p.clientLink(c, inet)
	for _, end := range []netlab.LinkEnd{l.cfg.A, l.cfg.B} {
		if hostnet.NsLinkExists(ctx, end.Netns, end.Device) {
			if err := hostnet.IP(ctx, "-n", end.Netns, "addr", "flush", "dev", end.Device); err != nil {
				return err
			}
		}
	}
	if _, ok := inet.Hosts["client/"+c.Name]; ok {
		delete(inet.Hosts, "client/"+c.Name)
		return p.writeInternet(inet)
	}
	return nil
}

// syncClientRelay gives the client network's relay its link's config now and records it. The
// caller holds the provider lock.
func (p *Provider) syncClientRelay(c *ClientNetwork, inet *internetRecord) error {
	dir := p.clientDir(c.Name)
	pid, start, err := p.ensureRelay(dir, p.clientLink(c, inet).cfg, c.RelayPID, c.RelayStart)
	if err != nil {
		return fmt.Errorf("client network %s: link relay: %w", c.Name, err)
	}
	c.RelayPID, c.RelayStart = pid, start
	return writeClient(dir, c)
}

// syncClients gives every client network's relay the internet's addresses of the regions it has
// a latency to, after a region got or gave back its address. The caller holds the provider lock.
func (p *Provider) syncClients() error {
	inet, err := p.readInternet()
	if err != nil || inet == nil {
		return err
	}
	names, err := p.clientNames()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		c, err := readClient(p.clientDir(n))
		if err != nil || c == nil || len(c.RegionLatency) == 0 {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, p.syncClientRelay(c, inet))
	}
	return errors.Join(errs...)
}

// RemoveClient removes a client network: its processes, namespace, link and record (and the
// internet namespace, if nothing else is linked to it).
func (p *Provider) RemoveClient(ctx context.Context, name string) error {
	if !labelRE.MatchString(name) {
		return nil
	}
	return p.withProviderLock(func() error { return p.removeClient(ctx, name) })
}

func (p *Provider) removeClient(ctx context.Context, name string) error {
	ctx = context.WithoutCancel(ctx)
	dir := p.clientDir(name)
	c, err := readClient(dir)
	if err != nil {
		return err
	}
	var errs []error
	if c != nil {
		errs = append(errs, hostproc.Stop(ctx, c.RelayPID, c.RelayStart, 5*time.Second))
	}
	ns := clientNetns(p.opts.DataDir, name)
	errs = append(errs, hostnet.KillNetns(ctx, ns), hostnet.DeleteNetns(ctx, ns, ""))
	inetNs, hub := internetNetns(p.opts.DataDir), hubDevice(p.opts.DataDir, "client/"+name)
	if hostnet.NetnsExists(inetNs) && hostnet.NsLinkExists(ctx, inetNs, hub) {
		errs = append(errs, hostnet.IP(ctx, "-n", inetNs, "link", "delete", hub))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove client network %s: %w", name, err)
	}
	if err := p.releaseInternet(ctx, "client/"+name); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p.pruneNetDir()
	return nil
}

func readClient(dir string) (*ClientNetwork, error) {
	return statefile.Load[ClientNetwork](filepath.Join(dir, clientFile))
}

func writeClient(dir string, c *ClientNetwork) error {
	return statefile.WriteJSON(filepath.Join(dir, clientFile), c)
}

// clientNames lists the client networks recorded.
func (p *Provider) clientNames() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(p.netDir(), "clients"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && labelRE.MatchString(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// RemoveNetworks removes every client network, the front door and the network of every region
// without instances (those KeepRegions keeps too), and with them the internet namespace: what a test or an uninstall calls
// after deleting the instances.
func (p *Provider) RemoveNetworks(ctx context.Context) error {
	return p.withProviderLock(func() error {
		records, err := p.records()
		if err != nil {
			return err
		}
		var errs []error
		clients, err := p.clientNames()
		if err != nil {
			return err
		}
		for _, c := range clients {
			errs = append(errs, p.removeClient(ctx, c))
		}
		errs = append(errs, p.removeFront(ctx))
		errs = append(errs, p.removeIdleRegions(ctx, records, nil))
		// A crash between the last removals and the internet's left its namespace alone.
		errs = append(errs, p.releaseInternet(ctx, ""))
		return errors.Join(errs...)
	})
}
