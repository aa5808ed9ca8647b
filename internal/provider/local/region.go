// Region networks: each region of a data directory is a network of its own, its instances'
// bridge and subnet behind a router namespace whose link to the internet namespace is shaped
// (latency, jitter, loss). docs/regions.md draws it.

package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider"
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
	Shape netlab.Shape `json:"shape"`
	Chaos *Chaos       `json:"chaos,omitempty"`
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
	Shape netlab.Shape
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

func (p *Provider) regionNetDir(region string) string {
	return filepath.Join(p.netDir(), "regions", region)
}

// RegionHostNames returns what a region's network puts on the host: the router and internet
// network namespaces and the router's veth on the region bridge (besides the bridge itself,
// BridgeName).
func (p *Provider) RegionHostNames(region string) (router, internet, hostVeth string) {
	return routerNetns(p.opts.DataDir, region), internetNetns(p.opts.DataDir), routerVeth(p.opts.DataDir, region)
}

func readRegionNet(dir string) (*regionNet, error) {
	return statefile.Load[regionNet](filepath.Join(dir, regionFile))
}

func writeRegionNet(dir string, r *regionNet) error {
	return statefile.WriteJSON(filepath.Join(dir, regionFile), r)
}

// regionNets lists the region networks recorded, by region name.
func (p *Provider) regionNets() ([]*regionNet, error) {
	entries, err := os.ReadDir(filepath.Join(p.netDir(), "regions"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*regionNet
	for _, e := range entries {
		if !e.IsDir() || !labelRE.MatchString(e.Name()) {
			continue
		}
		r, err := readRegionNet(filepath.Join(p.netDir(), "regions", e.Name()))
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

// EnsureRegion makes the region's network (bridge, router namespace, shaped link to the
// internet) or repairs it, with the link shaped as the region's options say (see
// ValidateOptions; a chaos action in force stays in force). Create calls it for every
// instance; the controller may call it before the first one. It is idempotent.
func (p *Provider) EnsureRegion(ctx context.Context, region string, options map[string]string) (RegionNetwork, error) {
	if region == "" {
		region = DefaultRegion
	}
	if !labelRE.MatchString(region) || len(region) > 63 {
		return RegionNetwork{}, fmt.Errorf("region %q must be a DNS label", region)
	}
	shape, errs := netlab.ParseShape(field.NewPath("options"), options)
	if len(errs) > 0 {
		return RegionNetwork{}, fmt.Errorf("region %s: %w", region, errs.ToAggregate())
	}
	var out RegionNetwork
	err := p.withProviderLock(func() error {
		reg, err := p.ensureRegionBridge(ctx, region)
		if err != nil {
			return err
		}
		rn, err := p.ensureRegionNet(ctx, reg, shape)
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

// ensureRegionBridge gives the region its subnet and bridge (as the first instance's Create
// does). The caller holds the provider lock.
func (p *Provider) ensureRegionBridge(ctx context.Context, region string) (*regionRecord, error) {
	hostLk, err := statefile.Lock(hostnet.LockPath)
	if err != nil {
		return nil, err
	}
	defer hostLk.Unlock()
	regions, err := readRegions(p.regionsDir())
	if err != nil {
		return nil, err
	}
	records, err := p.records()
	if err != nil {
		return nil, err
	}
	others := 0
	for _, r := range records {
		if r.Spec.Region == region {
			others++
		}
	}
	reg, subnet, err := p.regionSubnet(regions, region, others)
	if err != nil {
		return nil, err
	}
	if err := writeRegion(p.regionsDir(), reg); err != nil {
		return nil, err
	}
	if err := ensureBridge(ctx, reg.Bridge, fmt.Sprintf("%s/%d", hostnet.HostAddr(subnet, gatewayHost), subnet.Bits())); err != nil {
		return nil, err
	}
	return reg, nil
}

// ensureRegionNet makes the region's router, link and relay, recording first. The caller holds
// the provider lock and has made the bridge.
func (p *Provider) ensureRegionNet(ctx context.Context, reg *regionRecord, shape netlab.Shape) (*regionNet, error) {
	dir := p.regionNetDir(reg.Region)
	rn, err := readRegionNet(dir)
	if err != nil {
		return nil, err
	}
	inet, err := p.ensureInternet(ctx)
	if err != nil {
		return nil, err
	}
	wan, err := p.internetHost(inet, "region/"+reg.Region)
	if err != nil {
		return nil, err
	}
	subnet, err := netip.ParsePrefix(reg.Subnet)
	if err != nil {
		return nil, fmt.Errorf("subnet %q: %w", reg.Subnet, err)
	}
	if rn == nil || rn.Phase == netRemoving {
		rn = &regionNet{Region: reg.Region, Phase: netCreating}
	}
	rn.Bridge, rn.Subnet = reg.Bridge, reg.Subnet
	rn.RouterNetns = routerNetns(p.opts.DataDir, reg.Region)
	rn.HostVeth = routerVeth(p.opts.DataDir, reg.Region)
	rn.LANAddress = hostnet.HostAddr(subnet, routerLANHost).String()
	rn.WANAddress = wan.String()
	rn.HubDevice = hubDevice(p.opts.DataDir, "region/"+reg.Region)
	rn.Shape = shape
	if err := writeRegionNet(dir, rn); err != nil {
		return nil, err
	}

	if err := hostnet.EnsureNetns(ctx, rn.RouterNetns, false); err != nil {
		return nil, fmt.Errorf("router namespace: %w", err)
	}
	if !hostnet.LinkExists(rn.HostVeth) && !hostnet.NsLinkExists(ctx, rn.RouterNetns, routerLAN) {
		if err := hostnet.IP(ctx, "link", "add", rn.HostVeth, "type", "veth", "peer", "name", routerLAN, "netns", rn.RouterNetns); err != nil {
			return nil, fmt.Errorf("router's leg on the bridge: %w", err)
		}
	}
	steps := [][]string{
		{"link", "set", rn.HostVeth, "master", rn.Bridge, "up"},
		{"-n", rn.RouterNetns, "addr", "replace", fmt.Sprintf("%s/%d", rn.LANAddress, subnet.Bits()), "dev", routerLAN},
		{"-n", rn.RouterNetns, "link", "set", routerLAN, "up"},
	}
	for _, s := range steps {
		if err := hostnet.IP(ctx, s...); err != nil {
			return nil, fmt.Errorf("router's leg on the bridge: %w", err)
		}
	}
	l := p.regionLink(rn, inet)
	if err := ensureLinkDevices(ctx, l); err != nil {
		return nil, fmt.Errorf("link to the internet: %w", err)
	}
	pid, start, err := p.ensureRelay(dir, l.cfg, rn.RelayPID, rn.RelayStart)
	if err != nil {
		return nil, fmt.Errorf("link relay: %w", err)
	}
	rn.RelayPID, rn.RelayStart, rn.Phase = pid, start, netReady
	if err := writeRegionNet(dir, rn); err != nil {
		return nil, err
	}
	if err := p.syncClients(); err != nil {
		return nil, err
	}
	p.log.Info("region network ready", "region", rn.Region, "router", rn.RouterNetns, "lan", rn.LANAddress, "wan", rn.WANAddress, "shape", rn.effectiveShape().String())
	return rn, nil
}

// regionLink is the region's link: the router's wan0 to the internet's hub device.
func (p *Provider) regionLink(rn *regionNet, inet *internetRecord) link {
	sn, _ := netip.ParsePrefix(inet.Subnet)
	return link{
		cfg: netlab.LinkConfig{
			Name:  "region " + rn.Region,
			A:     netlab.LinkEnd{Netns: rn.RouterNetns, Device: routerWAN},
			B:     netlab.LinkEnd{Netns: inet.Netns, Device: rn.HubDevice},
			Shape: rn.effectiveShape(),
		},
		addrA:        netip.MustParseAddr(rn.WANAddress),
		hub:          hostnet.HostAddr(sn, hubHost),
		defaultRoute: true,
	}
}

func (rn *regionNet) effectiveShape() netlab.Shape {
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
func (p *Provider) Region(region string) (RegionNetwork, error) {
	rn, err := readRegionNet(p.regionNetDir(region))
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
// The caller holds the provider lock.
func (p *Provider) removeRegionNet(ctx context.Context, region string) error {
	ctx = context.WithoutCancel(ctx)
	dir := p.regionNetDir(region)
	rn, err := readRegionNet(dir)
	if err != nil {
		return err
	}
	if rn == nil {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) && !hostnet.NetnsExists(routerNetns(p.opts.DataDir, region)) {
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
	if err := hostnet.KillNetns(ctx, routerNetns(p.opts.DataDir, region)); err != nil {
		errs = append(errs, err)
	}
	if err := hostnet.DeleteNetns(ctx, routerNetns(p.opts.DataDir, region), routerVeth(p.opts.DataDir, region)); err != nil {
		errs = append(errs, fmt.Errorf("remove the router namespace: %w", err))
	}
	inetNs := internetNetns(p.opts.DataDir)
	hub := hubDevice(p.opts.DataDir, "region/"+region)
	if hostnet.NetnsExists(inetNs) && hostnet.NsLinkExists(ctx, inetNs, hub) {
		if err := hostnet.IP(ctx, "-n", inetNs, "link", "delete", hub); err != nil {
			errs = append(errs, fmt.Errorf("remove the internet's end of the link: %w", err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("remove the network of region %s: %w", region, err)
	}
	if err := p.releaseInternet(ctx, "region/"+region); err != nil {
		return err
	}
	if err := p.syncClients(); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p.pruneNetDir()
	p.log.Info("region network removed", "region", region)
	return nil
}

// removeRegion removes a region's network and its bridge, which no instance uses. The caller
// holds the provider lock.
func (p *Provider) removeRegion(ctx context.Context, region string) error {
	if err := p.removeRegionNet(ctx, region); err != nil {
		return err
	}
	return hostnet.DeleteLink(context.WithoutCancel(ctx), bridgeName(p.opts.DataDir, region))
}

// reconcileNetworks runs when the provider starts: it finishes removals and half-made networks
// that a crash interrupted (the next EnsureRegion makes them again) and undoes chaos actions,
// which never outlive the herd up that started them.
func (p *Provider) reconcileNetworks(ctx context.Context) error {
	return p.withProviderLock(func() error {
		nets, err := p.regionNets()
		if err != nil {
			return err
		}
		records, err := p.records()
		if err != nil {
			return err
		}
		var errs []error
		for _, rn := range nets {
			if rn.Phase != netReady {
				p.log.Warn("removing a region network a crash left half made or half removed", "region", rn.Region, "phase", rn.Phase)
				if slices.ContainsFunc(records, func(r *record) bool { return r.Spec.Region == rn.Region }) {
					errs = append(errs, p.removeRegionNet(ctx, rn.Region)) // its instances keep the bridge
				} else {
					errs = append(errs, p.removeRegion(ctx, rn.Region))
				}
				continue
			}
			switch {
			case rn.Chaos != nil:
				p.log.Warn("undoing a chaos action left from before this start", "region", rn.Region, "action", rn.Chaos.Action, "since", rn.Chaos.Since)
				errs = append(errs, p.setChaos(ctx, rn, nil))
			case !hostproc.Alive(rn.RelayPID, rn.RelayStart) && hostnet.NetnsExists(rn.RouterNetns):
				// Without its relay the region is cut off: start it again.
				p.log.Warn("restarting the link relay of a region", "region", rn.Region)
				errs = append(errs, p.syncRelay(rn))
			}
		}
		return errors.Join(errs...)
	})
}

// ValidateOptions implements provider.OptionsValidator: latency, jitter and loss shape the
// region's link to the internet (docs/regions.md).
func (p *Provider) ValidateOptions(path *field.Path, opts map[string]string) field.ErrorList {
	errs := provider.UnknownOptions(path, opts, Name, netlab.OptionLatency, netlab.OptionJitter, netlab.OptionLoss)
	_, shapeErrs := netlab.ParseShape(path, opts)
	return append(errs, shapeErrs...)
}
