// Client networks: namespaces linked to the internet namespace, where clients (tests, load
// generators, DNS resolvers) run as users somewhere on the internet would, each network with
// its own shaped link (its distance to the internet, added to every region's).

package netlab

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
	Shape Shape `json:"shape"`
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

func (l *Lab) clientDir(name string) string { return filepath.Join(l.opts.Dir, "clients", name) }

// ClientNetns returns the name of the network namespace of client network name.
func (l *Lab) ClientNetns(name string) string { return clientNetns(l.opts.DataDir, name) }

// AddClient makes (or repairs, or reshapes) a client network on the internet: a namespace with
// one link to the internet namespace, shaped as shape says, with regionLatency (region name ->
// round trip) more to some regions, and a default route through it.
func (l *Lab) AddClient(ctx context.Context, name string, shape Shape, regionLatency map[string]time.Duration) (ClientNetwork, error) {
	if !isLabel(name) {
		return ClientNetwork{}, fmt.Errorf("client network %q: the name must be a DNS label", name)
	}
	var out ClientNetwork
	err := l.opts.Instances.Lock(func() error {
		inet, err := l.ensureInternet(ctx)
		if err != nil {
			return err
		}
		network, err := l.internetNetwork(inet, "client/"+name)
		if err != nil {
			return err
		}
		dir := l.clientDir(name)
		c, err := readClient(dir)
		if err != nil {
			return err
		}
		if c == nil {
			c = &ClientNetwork{Name: name}
		}
		addr := hostnet.HostAddr(network, clientHost).String()
		moved := c.Address != "" && c.Address != addr
		c.Netns, c.Address, c.Network, c.Shape, c.RegionLatency = clientNetns(l.opts.DataDir, name), addr, network.String(), shape, regionLatency
		if err := writeClient(dir, c); err != nil {
			return err
		}
		if err := hostnet.EnsureNetns(ctx, c.Netns, false); err != nil {
			return err
		}
		if moved {
			// Made when client networks shared the internet's /24: its old address goes.
			if err := l.flushClientLink(ctx, c, inet); err != nil {
				return err
			}
		}
		if err := ensureLinkDevices(ctx, l.clientLink(c, inet)); err != nil {
			return err
		}
		if err := l.syncClientRelay(c, inet); err != nil {
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
func (l *Lab) clientLink(c *ClientNetwork, inet *internetRecord) link {
	sn, _ := netip.ParsePrefix(inet.Subnet)
	addr, _ := netip.ParseAddr(c.Address)
	network, _ := netip.ParsePrefix(c.Network)
	cfg := LinkConfig{
		Name:  "client " + c.Name,
		A:     LinkEnd{Netns: c.Netns, Device: "eth0"},
		B:     LinkEnd{Netns: inet.Netns, Device: hubDevice(l.opts.DataDir, "client/"+c.Name)},
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
func (l *Lab) flushClientLink(ctx context.Context, c *ClientNetwork, inet *internetRecord) error {
	lk := l.clientLink(c, inet)
	for _, end := range []LinkEnd{lk.cfg.A, lk.cfg.B} {
		if hostnet.HasLink(end.Netns, end.Device) {
			if err := hostnet.FlushAddresses(end.Netns, end.Device); err != nil {
				return err
			}
		}
	}
	if _, ok := inet.Hosts["client/"+c.Name]; ok {
		delete(inet.Hosts, "client/"+c.Name)
		return l.writeInternet(inet)
	}
	return nil
}

// syncClientRelay gives the client network's relay its link's config now and records it. The
// caller holds the lock.
func (l *Lab) syncClientRelay(c *ClientNetwork, inet *internetRecord) error {
	dir := l.clientDir(c.Name)
	pid, start, err := l.ensureRelay(dir, l.clientLink(c, inet).cfg, c.RelayPID, c.RelayStart)
	if err != nil {
		return fmt.Errorf("client network %s: link relay: %w", c.Name, err)
	}
	c.RelayPID, c.RelayStart = pid, start
	return writeClient(dir, c)
}

// syncClients gives every client network's relay the internet's addresses of the regions it has
// a latency to, after a region got or gave back its address. The caller holds the lock.
func (l *Lab) syncClients() error {
	inet, err := l.readInternet()
	if err != nil || inet == nil {
		return err
	}
	names, err := l.clientNames()
	if err != nil {
		return err
	}
	var errs []error
	for _, n := range names {
		c, err := readClient(l.clientDir(n))
		if err != nil || c == nil || len(c.RegionLatency) == 0 {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, l.syncClientRelay(c, inet))
	}
	return errors.Join(errs...)
}

// RemoveClient removes a client network: its processes, namespace, link and record (and the
// internet namespace, if nothing else is linked to it).
func (l *Lab) RemoveClient(ctx context.Context, name string) error {
	if !isLabel(name) {
		return nil
	}
	return l.opts.Instances.Lock(func() error { return l.removeClient(ctx, name) })
}

func (l *Lab) removeClient(ctx context.Context, name string) error {
	ctx = context.WithoutCancel(ctx)
	dir := l.clientDir(name)
	c, err := readClient(dir)
	if err != nil {
		return err
	}
	var errs []error
	if c != nil {
		errs = append(errs, hostproc.Stop(ctx, c.RelayPID, c.RelayStart, 5*time.Second))
	}
	ns := clientNetns(l.opts.DataDir, name)
	errs = append(errs, hostnet.KillNetns(ctx, ns), hostnet.DeleteNetns(ctx, ns, ""))
	inetNs, hub := internetNetns(l.opts.DataDir), hubDevice(l.opts.DataDir, "client/"+name)
	if hostnet.NetnsExists(inetNs) {
		errs = append(errs, hostnet.RemoveLink(inetNs, hub))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove client network %s: %w", name, err)
	}
	if err := l.releaseInternet(ctx, "client/"+name); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	l.pruneNetDir()
	return nil
}

func readClient(dir string) (*ClientNetwork, error) {
	return statefile.Load[ClientNetwork](filepath.Join(dir, clientFile))
}

func writeClient(dir string, c *ClientNetwork) error {
	return statefile.WriteJSON(filepath.Join(dir, clientFile), c)
}

// clientNames lists the client networks recorded.
func (l *Lab) clientNames() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(l.opts.Dir, "clients"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() && isLabel(e.Name()) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// RemoveNetworks removes every client network, the front door and the network of every region
// without instances (those KeepRegions keeps too), and with them the internet namespace: what a test or an uninstall calls
// after deleting the instances.
func (l *Lab) RemoveNetworks(ctx context.Context) error {
	return l.opts.Instances.Lock(func() error {
		var errs []error
		clients, err := l.clientNames()
		if err != nil {
			return err
		}
		for _, c := range clients {
			errs = append(errs, l.removeClient(ctx, c))
		}
		errs = append(errs, l.removeFront(ctx))
		errs = append(errs, l.RemoveIdleRegions(ctx, nil))
		// A crash between the last removals and the internet's left its namespace alone.
		errs = append(errs, l.releaseInternet(ctx, ""))
		return errors.Join(errs...)
	})
}

// RemoveIdleRegions removes the network and bridge of every region without instances that keep
// does not name. The caller holds the lock (Instances.Lock).
func (l *Lab) RemoveIdleRegions(ctx context.Context, keep map[string]bool) error {
	nets, err := l.regionNets()
	if err != nil {
		return err
	}
	regions, err := l.bridges()
	if err != nil {
		return err
	}
	for _, rn := range nets {
		if _, ok := regions[rn.Region]; !ok {
			regions[rn.Region] = Bridge{Region: rn.Region}
		}
	}
	var errs []error
	for region, b := range regions {
		if b.Instances == 0 && !keep[region] {
			errs = append(errs, l.removeRegion(ctx, region))
		}
	}
	return errors.Join(errs...)
}
