package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/statefile"
)

// Addresses inside a region's /24: the bridge has .1; instances get .10 to .254.
const (
	gatewayHost   = 1
	firstHost     = 10
	lastHost      = 254
	regionsSubdir = "regions"
)

// regionRecord is regions/<region>.json: the subnet a region was given, kept so that it stays the
// same for the region's life, and the last instance address handed out, so that addresses are
// reused as late as possible (a host's neighbour cache and a load balancer may remember them).
type regionRecord struct {
	Region string `json:"region"`
	Subnet string `json:"subnet"`
	Bridge string `json:"bridge"`
	// LastHost is the last host number given to an instance of the region.
	LastHost int `json:"lastHost,omitempty"`
}

// Names derived from an instance's name, the same in every process, so that a Delete finds what
// an interrupted Create made even without a record.

// netnsName is the instance's network namespace.
func netnsName(name string) string { return "herd-" + name }

// cgroupRootOf is the cgroup the instance runs under in every hierarchy.
func cgroupRootOf(name string) string { return "/herd-" + name }

// vethName is the host end of the instance's veth pair: interface names have at most 15 bytes,
// so it is a hash of the name.
func vethName(name string) string { return "hv" + hostnet.ShortHash(name, 12) }

// bridgeName is the host bridge of a region of this data directory. The data directory is part
// of the hash so that two herd data directories (a user's and a test's) never share a bridge,
// whose life each ties to its own instances.
func bridgeName(dataDir, region string) string {
	return "herdbr-" + hostnet.ShortHash(dataDir+"\x00"+region, 8)
}

// readRegions returns every region record of the provider directory, by region name.
func readRegions(dir string) (map[string]*regionRecord, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]*regionRecord{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read regions: %w", err)
	}
	out := map[string]*regionRecord{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("read region record: %w", err)
		}
		var r regionRecord
		if err := json.Unmarshal(data, &r); err != nil {
			return nil, fmt.Errorf("region record %s: %w", filepath.Join(dir, e.Name()), err)
		}
		out[r.Region] = &r
	}
	return out, nil
}

func writeRegion(dir string, r *regionRecord) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("region record: %w", err)
	}
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return statefile.WriteAtomic(filepath.Join(dir, r.Region+".json"), append(data, '\n'))
}

// pickHost returns the next free host number of a /24 after last (wrapping), skipping used ones:
// addresses are reused as late as possible.
func pickHost(last int, used map[int]bool) (int, error) {
	if last < firstHost || last > lastHost {
		last = firstHost - 1
	}
	span := lastHost - firstHost + 1
	for i := 1; i <= span; i++ {
		h := firstHost + (last-firstHost+i+span)%span
		if !used[h] {
			return h, nil
		}
	}
	return 0, fmt.Errorf("no free address left: the region already has %d instances", span)
}

// allocate gives a new record its region subnet and address and writes it, then makes sure the
// region's bridge exists; all under the provider lock, so that addresses never collide and a
// bridge is never removed while an instance of its region is being made.
func (p *Provider) allocate(ctx context.Context, dir string, rec *record) error {
	lk, err := statefile.Lock(filepath.Join(p.dir, lockFileName))
	if err != nil {
		return err
	}
	defer lk.Unlock()
	// Subnets are chosen from what the host shows. Two data directories choosing at once would
	// both see the same /24 free, so the choice and the bridge creation also hold a host-wide lock.
	hostLk, err := statefile.Lock(hostnet.LockPath)
	if err != nil {
		return err
	}
	defer hostLk.Unlock()
	regions, err := readRegions(p.regionsDir())
	if err != nil {
		return err
	}
	if rec.Address == "" {
		records, err := p.records()
		if err != nil {
			return err
		}
		others := 0
		for _, r := range records {
			if r.Spec.Region == rec.Spec.Region && r.Spec.Name != rec.Spec.Name {
				others++
			}
		}
		reg, subnet, err := p.regionSubnet(regions, rec.Spec.Region, others)
		if err != nil {
			return err
		}
		used := map[int]bool{}
		for _, r := range records {
			if a, err := netip.ParseAddr(r.Address); err == nil && subnet.Contains(a) {
				used[int(a.As4()[3])] = true
			}
		}
		h, err := pickHost(reg.LastHost, used)
		if err != nil {
			return fmt.Errorf("region %s (%s): %w", reg.Region, reg.Subnet, err)
		}
		reg.LastHost = h
		if err := writeRegion(p.regionsDir(), reg); err != nil {
			return err
		}
		rec.Address = hostnet.HostAddr(subnet, h).String()
		rec.PrefixLen = subnet.Bits()
		rec.Gateway = hostnet.HostAddr(subnet, gatewayHost).String()
		rec.Bridge = reg.Bridge
		// From here on the address is taken, whatever happens to this process.
		if err := writeRecord(dir, rec); err != nil {
			return err
		}
	}
	if err := ensureBridge(ctx, rec.Bridge, fmt.Sprintf("%s/%d", rec.Gateway, rec.PrefixLen)); err != nil {
		return fmt.Errorf("region %s: %w", rec.Spec.Region, err)
	}
	return nil
}

// regionSubnet returns the record of region with the subnet it keeps: the recorded one, or a
// new one when there is none, or when the bridge went with the region's last instance (others
// is how many other instances the region has) and the host has taken the subnet since. The
// caller holds the provider and host locks, and writes the record.
func (p *Provider) regionSubnet(regions map[string]*regionRecord, region string, others int) (*regionRecord, netip.Prefix, error) {
	reg := regions[region]
	own := map[string]bool{}
	for _, r := range regions {
		own[r.Bridge] = true
	}
	host, err := hostnet.HostPrefixes(own)
	if err != nil {
		return nil, netip.Prefix{}, err
	}
	if reg != nil && others == 0 && !hostnet.LinkExists(reg.Bridge) {
		// The bridge went with the region's last instance: the subnet may have been taken
		// on the host since.
		if sn, err := netip.ParsePrefix(reg.Subnet); err != nil || hostnet.Overlaps(sn, host) {
			p.log.Warn("the region's subnet is now used on the host; choosing another", "region", reg.Region, "subnet", reg.Subnet)
			reg.Subnet = ""
		}
	}
	if reg == nil || reg.Subnet == "" {
		var taken []netip.Prefix
		for _, r := range regions {
			if r.Region == region {
				continue
			}
			if sn, err := netip.ParsePrefix(r.Subnet); err == nil {
				taken = append(taken, sn)
			}
		}
		// The internet's subnets (its own, the client networks') are not on the host: keep
		// regions off them too.
		taken = append(taken, p.lab.Subnets()...)
		sn, err := hostnet.PickSubnet(p.opts.SubnetPool, taken, host)
		if err != nil {
			return nil, netip.Prefix{}, err
		}
		if reg == nil {
			reg = &regionRecord{Region: region, Bridge: bridgeName(p.opts.DataDir, region)}
		}
		reg.Subnet = sn.String()
	}
	subnet, err := netip.ParsePrefix(reg.Subnet)
	if err != nil {
		return nil, netip.Prefix{}, fmt.Errorf("region %s: subnet %q: %w", reg.Region, reg.Subnet, err)
	}
	return reg, subnet, nil
}

// releaseBridge deletes a region's network and bridge when no instance of the region is left,
// unless KeepRegions keeps the region.
func (p *Provider) releaseBridge(ctx context.Context, region, bridge string) error {
	return p.withProviderLock(func() error {
		if p.keeps(region) {
			return nil
		}
		records, err := p.records()
		if err != nil {
			return err
		}
		for _, r := range records {
			if r.Spec.Region == region || r.Bridge == bridge {
				return nil
			}
		}
		if err := p.lab.RemoveRegionNetwork(ctx, region); err != nil {
			return err
		}
		if err := hostnet.DeleteLink(context.WithoutCancel(ctx), bridge); err != nil {
			return fmt.Errorf("remove the bridge of region %s: %w", region, err)
		}
		return nil
	})
}
