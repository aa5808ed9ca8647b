// The internet of a data directory: a network namespace that every region's router and every
// client network is linked to, and the shaped links themselves (a TUN device at each end and a
// relay process between them, RunLinkRelay).

package netlab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/statefile"
)

// DefaultInternetPool is where the /24s of a data directory's internet come from: the internet
// namespace's own, and one per client network.
var DefaultInternetPool = netip.MustParsePrefix("10.216.0.0/16")

// Addresses in the internet's /24: every link's internet end has the hub address; routers and the
// front door get one address each from 1 to 253. A client network has a /24 of its own, whose .1
// is its address.
const (
	hubHost      = 254
	firstNetHost = 1
	lastNetHost  = 253
	clientHost   = 1
)

// Files and names of the network state, under Options.Dir.
const (
	internetFile   = "internet.json"
	linkConfigFile = "link.json"
	linkLogFile    = "link.log"
	// LinkRelayCommand is the herd command that runs a link's relay (RunLinkRelay).
	LinkRelayCommand = "link-relay"
)

// internetRecord is net/internet.json: the internet namespace of the data directory, its
// subnet, and which address each router and client was given.
type internetRecord struct {
	Netns  string `json:"netns"`
	Subnet string `json:"subnet"`
	// Hosts maps "region/<name>" and "front" to a host number of Subnet.
	Hosts map[string]int `json:"hosts"`
	// Networks maps "client/<name>" to the /24 of the pool a client network was given, routed to
	// its link: a load balancer that aggregates its clients per /24 tells client networks apart.
	Networks map[string]string `json:"networks,omitempty"`
}

// subnets returns the internet's /24 and every client network's.
func (r *internetRecord) subnets() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range append([]string{r.Subnet}, slices.Collect(maps.Values(r.Networks))...) {
		if sn, err := netip.ParsePrefix(s); err == nil {
			out = append(out, sn)
		}
	}
	return out
}

// internetNetns is the data directory's internet namespace. Instances' namespaces are
// "herd-<name>", so no instance can take it.
func internetNetns(dataDir string) string { return "herdinet-" + hostnet.ShortHash(dataDir, 8) }

// Subnets returns the internet's /24 and every client network's, which the instance provider
// keeps regions' subnets off. The caller holds the lock.
func (l *Lab) Subnets() []netip.Prefix {
	if inet, err := l.readInternet(); err == nil && inet != nil {
		return inet.subnets()
	}
	return nil
}

// InternetNetns returns the name of the internet network namespace (/run/netns/<name>), where
// clients' traffic to regions is routed.
func (l *Lab) InternetNetns() string { return internetNetns(l.opts.DataDir) }

func (l *Lab) readInternet() (*internetRecord, error) {
	r, err := statefile.Load[internetRecord](filepath.Join(l.opts.Dir, internetFile))
	if r != nil && r.Hosts == nil {
		r.Hosts = map[string]int{}
	}
	return r, err
}

func (l *Lab) writeInternet(r *internetRecord) error {
	return statefile.WriteJSON(filepath.Join(l.opts.Dir, internetFile), r)
}

// ensureInternet returns the internet record, choosing its subnet under the host lock and
// making its namespace if needed. The caller holds the lock.
func (l *Lab) ensureInternet(ctx context.Context) (*internetRecord, error) {
	inet, err := l.readInternet()
	if err != nil {
		return nil, err
	}
	if inet == nil {
		sn, err := l.freeInternetSubnet(nil)
		if err != nil {
			return nil, fmt.Errorf("the internet namespace: %w", err)
		}
		inet = &internetRecord{Netns: internetNetns(l.opts.DataDir), Subnet: sn.String(), Hosts: map[string]int{}}
		if err := l.writeInternet(inet); err != nil {
			return nil, err
		}
	}
	if err := hostnet.EnsureNetns(ctx, inet.Netns, true); err != nil {
		return nil, fmt.Errorf("the internet namespace: %w", err)
	}
	return inet, nil
}

// freeInternetSubnet picks a /24 of the internet pool that overlaps none of taken, no region
// subnet of this data directory (a router holds both) and no address of the host. The caller
// holds the lock; the choice holds the host-wide lock, as regions' choices do.
func (l *Lab) freeInternetSubnet(taken []netip.Prefix) (netip.Prefix, error) {
	hostLk, err := statefile.Lock(hostnet.LockPath)
	if err != nil {
		return netip.Prefix{}, err
	}
	defer hostLk.Unlock()
	regions, err := l.opts.Instances.Bridges()
	if err != nil {
		return netip.Prefix{}, err
	}
	own := map[string]bool{}
	for _, r := range regions {
		own[r.Name] = true
		if r.Subnet.IsValid() {
			taken = append(taken, r.Subnet)
		}
	}
	host, err := hostnet.HostPrefixes(own)
	if err != nil {
		return netip.Prefix{}, err
	}
	return hostnet.PickSubnet(l.opts.InternetPool, taken, host)
}

// internetNetwork gives key ("client/y") a /24 of its own from the internet pool, once.
func (l *Lab) internetNetwork(inet *internetRecord, key string) (netip.Prefix, error) {
	if s, ok := inet.Networks[key]; ok {
		sn, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("network of %s %q: %w", key, s, err)
		}
		return sn, nil
	}
	sn, err := l.freeInternetSubnet(inet.subnets())
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("a network for %s: %w", key, err)
	}
	if inet.Networks == nil {
		inet.Networks = map[string]string{}
	}
	inet.Networks[key] = sn.String()
	if err := l.writeInternet(inet); err != nil {
		return netip.Prefix{}, err
	}
	return sn, nil
}

// internetHost gives key ("region/x", "client/y") an address of the internet, once.
func (l *Lab) internetHost(inet *internetRecord, key string) (netip.Addr, error) {
	sn, err := netip.ParsePrefix(inet.Subnet)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("internet subnet %q: %w", inet.Subnet, err)
	}
	if h, ok := inet.Hosts[key]; ok {
		return hostnet.HostAddr(sn, h), nil
	}
	used := map[int]bool{}
	for _, h := range inet.Hosts {
		used[h] = true
	}
	for h := firstNetHost; h <= lastNetHost; h++ {
		if !used[h] {
			inet.Hosts[key] = h
			if err := l.writeInternet(inet); err != nil {
				return netip.Addr{}, err
			}
			return hostnet.HostAddr(sn, h), nil
		}
	}
	return netip.Addr{}, fmt.Errorf("the internet %s has no address left (%d regions and front door)", inet.Subnet, lastNetHost)
}

// releaseInternet gives key's address or network back and removes the internet namespace when nothing is
// linked to it any more. The caller holds the lock.
func (l *Lab) releaseInternet(ctx context.Context, key string) error {
	inet, err := l.readInternet()
	if err != nil || inet == nil {
		return err
	}
	_, host := inet.Hosts[key]
	_, network := inet.Networks[key]
	if host || network {
		delete(inet.Hosts, key)
		delete(inet.Networks, key)
		if err := l.writeInternet(inet); err != nil {
			return err
		}
	}
	if len(inet.Hosts)+len(inet.Networks) > 0 {
		return nil
	}
	if err := hostnet.DeleteNetns(ctx, inet.Netns, ""); err != nil {
		return fmt.Errorf("remove the internet namespace: %w", err)
	}
	if err := os.Remove(filepath.Join(l.opts.Dir, internetFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}

	l.log.Info("internet namespace removed", "netns", inet.Netns)
	return nil
}

// pruneNetDir removes the networks' state directories once they are empty.
func (l *Lab) pruneNetDir() {
	for _, d := range []string{filepath.Join(l.opts.Dir, "regions"), filepath.Join(l.opts.Dir, "clients"), l.frontDir(), l.opts.Dir} {
		_ = os.Remove(d) // fails, as it should, while something is left in it
	}
}

// link is a shaped point-to-point link: end A (a router or a client) has address AddrA, end B
// (the internet) the hub address; each end is a persistent TUN device.
type link struct {
	cfg   LinkConfig
	addrA netip.Addr
	hub   netip.Addr
	// defaultRoute: A routes everything through the link (a router or a client does).
	defaultRoute bool
	// networkA, if valid, is routed to end A in B's namespace: a client network's /24.
	networkA netip.Prefix
}

// ensureLinkDevices creates the link's TUN devices with their addresses and routes.
func ensureLinkDevices(ctx context.Context, l link) error {
	ends := []struct {
		end         LinkEnd
		local, peer netip.Addr
	}{{l.cfg.A, l.addrA, l.hub}, {l.cfg.B, l.hub, l.addrA}}
	for _, e := range ends {
		ns, dev := e.end.Netns, e.end.Device
		if err := hostnet.EnsureTun(ns, dev); err != nil {
			return err
		}
		if err := hostnet.PointToPoint(ns, dev, e.local, e.peer); err != nil {
			return err
		}
	}
	if l.defaultRoute {
		if err := hostnet.RouteDev(l.cfg.A.Netns, netip.Prefix{}, l.cfg.A.Device); err != nil {
			return err
		}
	}
	if l.networkA.IsValid() {
		if err := hostnet.RouteDev(l.cfg.B.Netns, l.networkA, l.cfg.B.Device); err != nil {
			return err
		}
	}
	return nil
}

// ensureRelay writes the link's config into dir and makes sure its relay runs with it: a
// running one (pid and start time as recorded) is told to re-read it, a dead one is started.
// It returns the relay's pid and start time.
func (l *Lab) ensureRelay(dir string, cfg LinkConfig, pid int, start uint64) (int, uint64, error) {
	path := filepath.Join(dir, linkConfigFile)
	cfg.Generation = time.Now().UnixNano()
	if err := statefile.WriteJSON(path, cfg); err != nil {
		return 0, 0, err
	}
	if hostproc.Alive(pid, start) {
		if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
			return 0, 0, fmt.Errorf("tell the link relay %d of the new shape: %w", pid, err)
		}
	} else {
		// A relay started by a process that crashed before recording it holds the devices.
		if err := hostproc.KillStrays(context.Background(), path); err != nil {
			return 0, 0, err
		}
		var err error
		pid, start, err = hostproc.StartDetached(filepath.Join(dir, linkLogFile), "", 0, l.opts.HerdBinary, LinkRelayCommand, "--link-config", path)
		if err != nil {
			return 0, 0, err
		}
	}
	// Wait until the relay applies this config (or dies): the caller's change holds when this returns.
	var died bool
	err := hostproc.WaitFor(context.Background(), relayAckTimeout, func() bool {
		died = !hostproc.Alive(pid, start)
		return died || ReadApplied(path) == cfg.Generation
	}, "the link relay to apply its config")
	if err == nil && died {
		err = fmt.Errorf("the link relay exited: %s", hostproc.LogTail(filepath.Join(dir, linkLogFile), 3))
	}
	if err != nil {
		return 0, 0, err
	}
	return pid, start, nil
}

// relayAckTimeout bounds how long a link relay may take to attach its devices or to apply a new
// shape (it takes milliseconds).
const relayAckTimeout = 10 * time.Second
