package controller

import (
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"herd.dev/herd/internal/provider"
)

// A provider whose regions hold resources of their own (provider.RegionKeeper) is told which of
// its regions the fleets name, so that it keeps a region while a fleet names it, even without
// instances (a fleet scaled to zero and back finds its region as it was), and removes it once no
// fleet does and its last instance is gone. It is told only once the controller has looked at
// every fleet (Synced): a partial view would let it remove a region a fleet not yet seen names.

// noteKeptRegions records the regions of a fleet's spec, by provider.
func (c *Controller) noteKeptRegions(fleet string, regions map[string]*regionState) {
	byProvider := map[string][]string{}
	for name, r := range regions {
		if r.inSpec {
			byProvider[r.region.Provider] = append(byProvider[r.region.Provider], name)
		}
	}
	c.fleetKept.Store(fleet, byProvider)
}

// keepRegions tells each RegionKeeper the regions the fleets name when they changed since it was
// last told; a provider that fails is told again after the next reconcile.
func (c *Controller) keepRegions(ctx context.Context) {
	want := map[string]map[string]bool{}
	c.fleetKept.Range(func(_, v any) bool {
		for prov, regions := range v.(map[string][]string) {
			if want[prov] == nil {
				want[prov] = map[string]bool{}
			}
			for _, r := range regions {
				want[prov][r] = true
			}
		}
		return true
	})
	c.keptMu.Lock()
	defer c.keptMu.Unlock()
	if c.lastKept == nil {
		c.lastKept = map[string]string{}
	}
	for name, p := range c.opts.Providers {
		keeper, ok := p.(provider.RegionKeeper)
		if !ok {
			continue
		}
		regions := slices.Sorted(maps.Keys(want[name]))
		joined := strings.Join(regions, ",")
		if last, told := c.lastKept[name]; told && last == joined {
			continue
		}
		start := time.Now()
		err := keeper.KeepRegions(ctx, regions)
		c.observeCall(name, "keep-regions", start, err)
		if err != nil {
			delete(c.lastKept, name)
			c.log.Warn("tell the provider which regions to keep", "provider", name, "regions", regions, "err", err)
			continue
		}
		c.lastKept[name] = joined
	}
}
