// Regions kept without instances: a region's network (bridge, router namespace, link, load
// balancer) is made with its first instance; it outlives its last one while a fleet still names
// the region, so that a fleet scaled to zero and back finds its region as it left it.

package local

import (
	"context"
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
		return p.lab.RemoveIdleRegions(ctx, keep)
	})
}

// keeps reports whether KeepRegions keeps region.
func (p *Provider) keeps(region string) bool {
	p.keptMu.Lock()
	defer p.keptMu.Unlock()
	return p.kept[region]
}
