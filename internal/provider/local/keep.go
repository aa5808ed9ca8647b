// Regions kept without instances: a region's network (bridge, router namespace, link, load
// balancer) is made with its first instance; it outlives its last one while a fleet still names
// the region, so that a fleet scaled to zero and back finds its region as it left it.

package local

import (
	"context"
	"errors"
)

// KeepRegions implements provider.RegionKeeper: the regions named are kept while they have no
// instance, and every other region without instances is removed now.
func (p *Provider) KeepRegions(ctx context.Context, regions []string) error {
	keep := make(map[string]bool, len(regions))
	for _, r := range regions {
		keep[r] = true
	}
	return p.withProviderLock(func() error {
		p.keptMu.Lock()
		p.kept = keep
		p.keptMu.Unlock()
		records, err := p.records()
		if err != nil {
			return err
		}
		return p.removeIdleRegions(ctx, records, keep)
	})
}

// keeps reports whether KeepRegions keeps region.
func (p *Provider) keeps(region string) bool {
	p.keptMu.Lock()
	defer p.keptMu.Unlock()
	return p.kept[region]
}

// removeIdleRegions removes the network and bridge of every region recorded that no instance of
// records runs in and keep does not name. The caller holds the provider lock.
func (p *Provider) removeIdleRegions(ctx context.Context, records []*record, keep map[string]bool) error {
	inUse := map[string]bool{}
	for _, r := range records {
		inUse[r.Spec.Region] = true
	}
	nets, err := p.regionNets()
	if err != nil {
		return err
	}
	regions, err := readRegions(p.regionsDir())
	if err != nil {
		return err
	}
	for _, rn := range nets {
		if _, ok := regions[rn.Region]; !ok {
			regions[rn.Region] = &regionRecord{Region: rn.Region}
		}
	}
	var errs []error
	for region := range regions {
		if !inUse[region] && !keep[region] {
			errs = append(errs, p.removeRegion(ctx, region))
		}
	}
	return errors.Join(errs...)
}
