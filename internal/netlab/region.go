// Region networks: each region of a data directory is a network of its own, its instances'
// bridge and subnet behind a router namespace whose link to the internet namespace is shaped
// (latency, jitter, loss). docs/regions.md draws it.

package netlab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/statefile"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Phases of a region network's record.
const (
	// netCreating: the record holds the names and addresses; the network may be partly made.
	netCreating = "creating"
	// netReady: everything was made once (EnsureRegion repairs what went missing since).
	netReady = "ready"
	// netRemoving: removal started; the next start finishes it.
	netRemoving = "removing"
)

// Names inside a router namespace.
const (
	routerLAN     = "lan0" // the router's leg on the region bridge
	routerWAN     = "wan0" // the router's end of its link to the internet
	routerLANHost = 2      // the router's address on the bridge: .2 of the region's /24
	bridgeHost    = 1      // the host's address on the bridge: .1
	regionFile    = "network.json"
)

// regionNet is net/regions/<region>/network.json: everything a region's network is made of,
// written before it is made, so that a restart finds and finishes or undoes it.
type regionNet struct {
	Region string `json:"region"`
	Phase  string `json:"phase"`
	// Bridge and Subnet are the region's bridge and /24 (regions/<region>.json).
	Bridge string `json:"bridge"`
	Subnet string `json:"subnet"`
	// RouterNetns is the router's namespace, HostVeth the bridge end of its LAN leg.
	RouterNetns string `json:"routerNetns"`
	HostVeth    string `json:"hostVeth"`
	// LANAddress is the router's address on the bridge (where the host reaches it, unshaped);
	// WANAddress its address on the internet (where clients reach it, shaped).
	LANAddress string `json:"lanAddress"`
	WANAddress string `json:"wanAddress"`
	// HubDevice is the internet's end of the link.
	HubDevice string `json:"hubDevice"`
	// Shape is the link's shape from the region's options; Chaos, when set, replaces it.
	Shape Shape  `json:"shape"`
	Chaos *Chaos `json:"chaos,omitempty"`
	// The link relay's and the load balancer's pid and start time (/proc/<pid>/stat field 22).
	RelayPID   int    `json:"relayPid,omitempty"`
	RelayStart uint64 `json:"relayStart,omitempty"`
	LBPID      int    `json:"lbPid,omitempty"`
	LBStart    uint64 `json:"lbStart,omitempty"`
}

// RegionNetwork is what a region's network looks like from outside.
type RegionNetwork struct {
	Region string
	// Bridge and Subnet hold the region's instances.
	Bridge string
	Subnet netip.Prefix
	// RouterNetns is the router's network namespace (/run/netns/<RouterNetns>).
	RouterNetns string
	// LANAddress is the router's address on the region bridge: the host reaches it directly,
	// not through the shaped link (the control plane's path).
	LANAddress netip.Addr
	// WANAddress is the router's address on the internet: clients reach it through the link.
	WANAddress netip.Addr
	// Shape is the link's shape now (the options', or a chaos action's while one is active).
	Shape Shape
	// Chaos is the chaos action in force on the link, nil if none.
	Chaos *Chaos
}

// routerNetns is the router namespace of a region of a data directory.
func routerNetns(dataDir, region string) string {
	return "herdrt-" + hostnet.ShortHash(dataDir+"\x00"+region, 8)
}

func routerVeth(dataDir, region string) string {
	return "hr" + hostnet.ShortHash(dataDir+"\x00"+region, 12)
}

func hubDevice(dataDir, key string) string { return "l" + hostnet.ShortHash(dataDir+"\x00"+key, 12) }

func (l *Lab) regionNetDir(region string) string {
	return filepath.Join(l.opts.Dir, "regions", region)
}

// RegionHostNames returns what a region's network puts on the host: the router and internet
// network namespaces and the router's veth on the region bridge (besides the bridge itself,
// the instance provider's).
func (l *Lab) RegionHostNames(region string) (router, internet, hostVeth string) {
	return routerNetns(l.opts.DataDir, region), internetNetns(l.opts.DataDir), routerVeth(l.opts.DataDir, region)
}

func readRegionNet(dir string) (*regionNet, error) {
	return statefile.Load[regionNet](filepath.Join(dir, regionFile))
}

func writeRegionNet(dir string, r *regionNet) error {
	return statefile.WriteJSON(filepath.Join(dir, regionFile), r)
}

// regionNets lists the region networks recorded, by region name.
func (l *Lab) regionNets() ([]*regionNet, error) {
	entries, err := os.ReadDir(filepath.Join(l.opts.Dir, "regions"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*regionNet
	for _, e := range entries {
		if !e.IsDir() || !isLabel(e.Name()) {
			continue
		}
		r, err := readRegionNet(filepath.Join(l.opts.Dir, "regions", e.Name()))
		if err != nil {
			return nil, err
		}
		if r == nil { // made nothing yet: the directory is all there is
			r = &regionNet{Region: e.Name(), Phase: netCreating}
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out, nil
}

// EnsureNetwork makes the region's network (bridge, router namespace, shaped link to the
// internet) or repairs it, with the link shaped as the region's options say (ParseShape; a chaos
// action in force stays in force). The local provider's Create calls it for every instance; the
// control plane may call it before the first one (EnsureRegion). It is idempotent.
func (l *Lab) EnsureNetwork(ctx context.Context, region string, options map[string]string) (RegionNetwork, error) {
	if region == "" {
		region = l.opts.DefaultRegion
	}
	if !isLabel(region) {
		return RegionNetwork{}, fmt.Errorf("region %q must be a DNS label", region)
	}
	shape, errs := ParseShape(field.NewPath("options"), options)
	if len(errs) > 0 {
		return RegionNetwork{}, fmt.Errorf("region %s: %w", region, errs.ToAggregate())
	}
	var out RegionNetwork
	err := l.opts.Instances.Lock(func() error {
		reg, err := l.opts.Instances.EnsureBridge(ctx, region)
		if err != nil {
			return err
		}
		rn, err := l.ensureRegionNet(ctx, reg, shape)
		if err != nil {
			return err
		}
		out = rn.view()
		return nil
	})
	if err != nil {
		return RegionNetwork{}, fmt.Errorf("region %s: %w", region, err)
	}
	return out, nil
}

// ensureRegionNet makes the region's router, link and relay, recording first. The caller holds
// the lock and has made the bridge.
func (l *Lab) ensureRegionNet(ctx context.Context, reg Bridge, shape Shape) (*regionNet, error) {
	dir := l.regionNetDir(reg.Region)
	rn, err := readRegionNet(dir)
	if err != nil {
		return nil, err
	}
	inet, err := l.ensureInternet(ctx)
	if err != nil {
		return nil, err
	}
	wan, err := l.internetHost(inet, "region/"+reg.Region)
	if err != nil {
		return nil, err
	}
	subnet := reg.Subnet
	if !subnet.IsValid() {
		return nil, fmt.Errorf("the bridge %s has no subnet", reg.Name)
	}
	if rn == nil || rn.Phase == netRemoving {
		rn = &regionNet{Region: reg.Region, Phase: netCreating}
	}
	rn.Bridge, rn.Subnet = reg.Name, subnet.String()
	rn.RouterNetns = routerNetns(l.opts.DataDir, reg.Region)
	rn.HostVeth = routerVeth(l.opts.DataDir, reg.Region)
	rn.LANAddress = hostnet.HostAddr(subnet, routerLANHost).String()
	rn.WANAddress = wan.String()
	rn.HubDevice = hubDevice(l.opts.DataDir, "region/"+reg.Region)
	rn.Shape = shape
	if err := writeRegionNet(dir, rn); err != nil {
		return nil, err
	}

	if err := hostnet.EnsureNetns(ctx, rn.RouterNetns, false); err != nil {
		return nil, fmt.Errorf("router namespace: %w", err)
	}
	if err := hostnet.AddVeth(rn.HostVeth, rn.Bridge, routerLAN, rn.RouterNetns); err != nil {
		return nil, fmt.Errorf("router's leg on the bridge: %w", err)
	}
	if err := hostnet.Address(rn.RouterNetns, routerLAN, netip.PrefixFrom(hostnet.HostAddr(subnet, routerLANHost), subnet.Bits())); err != nil {
		return nil, fmt.Errorf("router's leg on the bridge: %w", err)
	}
	if err := l.ensureCrossRegion(rn, subnet); err != nil {
		return nil, err
	}
	lk := l.regionLink(rn, inet)
	if err := ensureLinkDevices(ctx, lk); err != nil {
		return nil, fmt.Errorf("link to the internet: %w", err)
	}
	pid, start, err := l.ensureRelay(dir, lk.cfg, rn.RelayPID, rn.RelayStart)
	if err != nil {
		return nil, fmt.Errorf("link relay: %w", err)
	}
	rn.RelayPID, rn.RelayStart, rn.Phase = pid, start, netReady
	if err := writeRegionNet(dir, rn); err != nil {
		return nil, err
	}
	if err := l.syncClients(); err != nil {
		return nil, err
	}
	l.log.Info("region network ready", "region", rn.Region, "router", rn.RouterNetns, "lan", rn.LANAddress, "wan", rn.WANAddress, "shape", rn.effectiveShape().String())
	return rn, nil
}

// ensureCrossRegion lets the instances of the other regions reach the region's load balancer on
// the router's LAN address, as a discovery name answers it when their own region has no Ready
// instance of the fleet they call (docs/discovery.md): the host forwards what comes in on the
// region's bridge (and only there), and the router sends the other regions' subnets back through
// the host. The instances' addresses stay the packets' sources, which is how the load balancer
// tells their fleet. The path is the host's, unshaped: a region's latency is its clients'.
func (l *Lab) ensureCrossRegion(rn *regionNet, subnet netip.Prefix) error {
	if err := hostnet.Forward(rn.Bridge); err != nil {
		return fmt.Errorf("the region's bridge: %w", err)
	}
	if err := hostnet.RouteNetVia(rn.RouterNetns, l.opts.SubnetPool, hostnet.HostAddr(subnet, bridgeHost)); err != nil {
		return fmt.Errorf("router's route to the other regions: %w", err)
	}
	return nil
}

// regionLink is the region's link: the router's wan0 to the internet's hub device.
func (l *Lab) regionLink(rn *regionNet, inet *internetRecord) link {
	sn, _ := netip.ParsePrefix(inet.Subnet)
	return link{
		cfg: LinkConfig{
			Name:  "region " + rn.Region,
			A:     LinkEnd{Netns: rn.RouterNetns, Device: routerWAN},
			B:     LinkEnd{Netns: inet.Netns, Device: rn.HubDevice},
			Shape: rn.effectiveShape(),
		},
		addrA:        netip.MustParseAddr(rn.WANAddress),
		hub:          hostnet.HostAddr(sn, hubHost),
		defaultRoute: true,
	}
}

func (rn *regionNet) effectiveShape() Shape {
	if rn.Chaos != nil {
		return rn.Chaos.Shape
	}
	return rn.Shape
}

func (rn *regionNet) view() RegionNetwork {
	sn, _ := netip.ParsePrefix(rn.Subnet)
	lan, _ := netip.ParseAddr(rn.LANAddress)
	wan, _ := netip.ParseAddr(rn.WANAddress)
	return RegionNetwork{
		Region: rn.Region, Bridge: rn.Bridge, Subnet: sn, RouterNetns: rn.RouterNetns,
		LANAddress: lan, WANAddress: wan, Shape: rn.effectiveShape(), Chaos: rn.Chaos,
	}
}

// Region returns the network of a region as recorded, or an error when the region has none.
func (l *Lab) Region(region string) (RegionNetwork, error) {
	rn, err := readRegionNet(l.regionNetDir(region))
	if err != nil {
		return RegionNetwork{}, err
	}
	if rn == nil || rn.Phase != netReady {
		return RegionNetwork{}, fmt.Errorf("region %s has no network on this host: create an instance in it, or call EnsureRegion", region)
	}
	return rn.view(), nil
}

// removeRegionNet removes everything of a region's network but its bridge: its load balancer,
// link relay, router namespace (with its legs), the internet's end of the link, its internet
// address and its records. It works from the names alone when the record is gone or partial.
// The caller holds the lock.
func (l *Lab) removeRegionNet(ctx context.Context, region string) error {
	ctx = context.WithoutCancel(ctx)
	dir := l.regionNetDir(region)
	rn, err := readRegionNet(dir)
	if err != nil {
		return err
	}
	if rn == nil {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && !hostnet.NetnsExists(routerNetns(l.opts.DataDir, region)) {
			return nil
		}
		rn = &regionNet{Region: region}
	}
	if rn.Phase != netRemoving {
		rn.Phase = netRemoving
		if err := writeRegionNet(dir, rn); err != nil {
			return err
		}
	}
	var errs []error
	if err := hostproc.Stop(ctx, rn.LBPID, rn.LBStart, lbStopTimeout); err != nil {
		errs = append(errs, fmt.Errorf("stop the load balancer: %w", err))
	}
	if err := hostproc.Stop(ctx, rn.RelayPID, rn.RelayStart, 5*time.Second); err != nil {
		errs = append(errs, fmt.Errorf("stop the link relay: %w", err))
	}
	// Whatever else runs in the router namespace (a process started by hand there) goes too.
	if err := hostnet.KillNetns(ctx, routerNetns(l.opts.DataDir, region)); err != nil {
		errs = append(errs, err)
	}
	if err := hostnet.DeleteNetns(ctx, routerNetns(l.opts.DataDir, region), routerVeth(l.opts.DataDir, region)); err != nil {
		errs = append(errs, fmt.Errorf("remove the router namespace: %w", err))
	}
	inetNs := internetNetns(l.opts.DataDir)
	hub := hubDevice(l.opts.DataDir, "region/"+region)
	if hostnet.NetnsExists(inetNs) {
		if err := hostnet.RemoveLink(inetNs, hub); err != nil {
			errs = append(errs, fmt.Errorf("remove the internet's end of the link: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the network of region %s: %w", region, err)
	}
	if err := l.releaseInternet(ctx, "region/"+region); err != nil {
		return err
	}
	if err := l.syncClients(); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	l.pruneNetDir()
	l.log.Info("region network removed", "region", region)
	return nil
}

// removeRegion removes a region's network and its bridge, which no instance uses. The caller
// holds the lock.
func (l *Lab) removeRegion(ctx context.Context, region string) error {
	if err := l.removeRegionNet(ctx, region); err != nil {
		return err
	}
	return l.opts.Instances.RemoveBridge(context.WithoutCancel(ctx), region)
}

// RemoveRegionNetwork removes everything of a region's network but its bridge, which the instance
// provider removes: its load balancer, link relay, router namespace, link and records. The
// caller holds the lock (Instances.Lock).
func (l *Lab) RemoveRegionNetwork(ctx context.Context, region string) error {
	return l.removeRegionNet(ctx, region)
}

// Reconcile runs when the provider starts: it finishes removals and half-made networks
// that a crash interrupted (the next EnsureRegion makes them again) and undoes chaos actions,
// which never outlive the herd up that started them.
func (l *Lab) Reconcile(ctx context.Context) error {
	return l.opts.Instances.Lock(func() error {
		nets, err := l.regionNets()
		if err != nil {
			return err
		}
		bridges, err := l.bridges()
		if err != nil {
			return err
		}
		var errs []error
		for _, rn := range nets {
			if rn.Phase != netReady {
				l.log.Warn("removing a region network a crash left half made or half removed", "region", rn.Region, "phase", rn.Phase)
				if bridges[rn.Region].Instances > 0 {
					errs = append(errs, l.removeRegionNet(ctx, rn.Region)) // its instances keep the bridge
				} else {
					errs = append(errs, l.removeRegion(ctx, rn.Region))
				}
				continue
			}
			switch {
			case rn.Chaos != nil:
				l.log.Warn("undoing a chaos action left from before this start", "region", rn.Region, "action", rn.Chaos.Action, "since", rn.Chaos.Since)
				errs = append(errs, l.setChaos(ctx, rn, nil))
			case !hostproc.Alive(rn.RelayPID, rn.RelayStart) && hostnet.NetnsExists(rn.RouterNetns):
				// Without its relay the region is cut off: start it again.
				l.log.Warn("restarting the link relay of a region", "region", rn.Region)
				errs = append(errs, l.syncRelay(rn))
			}
		}
		return errors.Join(errs...)
	})
}
