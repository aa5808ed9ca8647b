// The provider's regions as networks: the network lab (internal/netlab) makes each region's
// router, link, load balancer and the front door; the provider gives it each region's bridge and
// subnet, which its instances share, and its lock.

package local

import (
	"context"
	"fmt"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/statefile"
)

var (
	_ provider.RegionNetworks = (*Provider)(nil)
	_ netlab.Instances        = labInstances{}
)

// netSubdir is where the lab keeps its state, under the provider directory.
const netSubdir = "net"

// Lab returns the network lab of the provider's regions: their networks, the internet they meet
// in, client networks and the front door.
func (p *Provider) Lab() *netlab.Lab { return p.lab }

// RegionNetworks implements provider.RegionNetworks: the regions' networks on this host.
func (p *Provider) RegionNetworks() regionnet.Networks { return p.lab }

// ValidateOptions implements provider.OptionsValidator: latency, jitter and loss shape the
// region's link to the internet (docs/regions.md).
func (p *Provider) ValidateOptions(path *field.Path, opts map[string]string) field.ErrorList {
	errs := provider.UnknownOptions(path, opts, Name, netlab.OptionLatency, netlab.OptionJitter, netlab.OptionLoss)
	_, shapeErrs := netlab.ParseShape(path, opts)
	return append(errs, shapeErrs...)
}

// labInstances is what the lab asks of the provider (netlab.Instances).
type labInstances struct{ p *Provider }

func (h labInstances) Lock(f func() error) error { return h.p.withProviderLock(f) }

// EnsureBridge gives the region its subnet and bridge (as the first instance's Create does).
func (h labInstances) EnsureBridge(ctx context.Context, region string) (netlab.Bridge, error) {
	p := h.p
	hostLk, err := statefile.Lock(hostnet.LockPath)
	if err != nil {
		return netlab.Bridge{}, err
	}
	defer hostLk.Unlock()
	regions, err := readRegions(p.regionsDir())
	if err != nil {
		return netlab.Bridge{}, err
	}
	records, err := p.records()
	if err != nil {
		return netlab.Bridge{}, err
	}
	others := 0
	for _, r := range records {
		if r.Spec.Region == region {
			others++
		}
	}
	reg, subnet, err := p.regionSubnet(regions, region, others)
	if err != nil {
		return netlab.Bridge{}, err
	}
	if err := writeRegion(p.regionsDir(), reg); err != nil {
		return netlab.Bridge{}, err
	}
	if err := ensureBridge(ctx, reg.Bridge, fmt.Sprintf("%s/%d", hostnet.HostAddr(subnet, gatewayHost), subnet.Bits())); err != nil {
		return netlab.Bridge{}, err
	}
	return netlab.Bridge{Region: region, Name: reg.Bridge, Subnet: subnet, Instances: others}, nil
}

// Bridges lists the regions recorded, and those only instances' records name.
func (h labInstances) Bridges() ([]netlab.Bridge, error) {
	regions, err := readRegions(h.p.regionsDir())
	if err != nil {
		return nil, err
	}
	records, err := h.p.records()
	if err != nil {
		return nil, err
	}
	count := map[string]int{}
	for _, r := range records {
		count[r.Spec.Region]++
	}
	var out []netlab.Bridge
	for name, r := range regions {
		sn, _ := netip.ParsePrefix(r.Subnet)
		out = append(out, netlab.Bridge{Region: name, Name: r.Bridge, Subnet: sn, Instances: count[name]})
	}
	for name, n := range count {
		if _, ok := regions[name]; !ok {
			out = append(out, netlab.Bridge{Region: name, Instances: n})
		}
	}
	return out, nil
}

// RemoveBridge deletes the region's bridge.
func (h labInstances) RemoveBridge(ctx context.Context, region string) error {
	return hostnet.DeleteLink(ctx, bridgeName(h.p.opts.DataDir, region))
}
