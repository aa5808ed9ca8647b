package controller

import (
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// A fleet with spec.tenancy runs instances per tenant. Every instance a tenant owns carries the
// tenant in its record (the herd.dev/tenant label), so the load balancer sends it that tenant's
// requests only; the fleet's warm pool (booted, no tenant) is where a tenant with no instance
// gets one: the load balancer claims it (ClaimTenant) while it holds the tenant's first request,
// and the next reconcile gives the tenant a warm instance by writing its label, one store write,
// then refills the pool. Each active tenant is scaled, healed and rolled out on its own, like a
// region: a replacement of a tenant's instance is the tenant's, a rolling update replaces a
// tenant's instances within maxSurge and maxUnavailable of the tenant's own count. A tenant
// without a request for idleAfter loses its instances (scaled to zero).

// TenantActivity says when a tenant of a fleet last had a request: the load balancer.
type TenantActivity interface {
	TenantLastRequest(fleet, tenant string) time.Time
}

// tenantClaims are the tenants the load balancer asked instances for, by fleet, with when.
type tenantClaims struct {
	mu     sync.Mutex
	claims map[string]map[string]time.Time
}

// ClaimTenant asks for an instance for a tenant of a fleet with tenancy that has none serving: the
// fleet is reconciled at once. It returns at once; asking again for the same tenant is cheap.
func (c *Controller) ClaimTenant(fleet, tenant string) {
	tc := &c.tenantClaims
	tc.mu.Lock()
	if tc.claims == nil {
		tc.claims = map[string]map[string]time.Time{}
	}
	byTenant := tc.claims[fleet]
	if byTenant == nil {
		byTenant = map[string]time.Time{}
		tc.claims[fleet] = byTenant
	}
	_, had := byTenant[tenant]
	if !had {
		byTenant[tenant] = c.clock.Now()
	}
	tc.mu.Unlock()
	if !had {
		c.queue.Add(fleet)
	}
}

// claimsOf returns a copy of a fleet's claims.
func (c *Controller) claimsOf(fleet string) map[string]time.Time {
	tc := &c.tenantClaims
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return maps.Clone(tc.claims[fleet])
}

// settleClaim forgets a claim once its tenant has an instance (or was refused).
func (c *Controller) settleClaim(fleet, tenant string) {
	tc := &c.tenantClaims
	tc.mu.Lock()
	defer tc.mu.Unlock()
	delete(tc.claims[fleet], tenant)
}

// TenantOf returns the tenant an instance serves, "" for none (the warm pool, or no tenancy).
func TenantOf(in *v1alpha1.Instance) string { return in.Metadata.Labels[v1alpha1.LabelTenant] }

// planTenants scales, assigns, idles and rolls the tenants of the region planned, and keeps the
// warm pool. It stands in for scale() on a fleet with tenancy.
func (s *regionPlan) planTenants() {
	tn := s.fleet.Spec.Tenancy
	fleet := s.fleetName()
	now := s.c.clock.Now()
	byTenant := map[string][]*v1alpha1.Instance{}
	var warm []*v1alpha1.Instance
	stray := 0
	for _, in := range s.scoped() {
		tenant := TenantOf(in)
		if tenant != "" {
			// A tenant whose instance is being replaced (failed, deleted by healing) stays active:
			// the replacement is created now, and is the tenant's.
			byTenant[tenant] = append(byTenant[tenant], in)
			continue
		}
		if !holdsSlot(in) {
			continue
		}
		switch {
		case IsWarm(in):
			warm = append(warm, in)
		default:
			// An instance from before the fleet had tenancy serves nobody now.
			s.terminate(in, "the fleet routes by tenant: an instance without a tenant serves no request")
			stray++
		}
	}
	if stray > 0 {
		s.event(s.object, v1alpha1.EventNormal, "TenancyStarted", "deleting %d instances without a tenant", stray)
	}
	claims := s.c.claimsOf(fleet)
	for tenant := range claims {
		if _, has := byTenant[tenant]; has {
			s.c.settleClaim(fleet, tenant)
			continue
		}
		if !tn.Open && !slices.Contains(tn.Tenants, tenant) {
			s.c.settleClaim(fleet, tenant) // the load balancer refuses it too
			continue
		}
		byTenant[tenant] = nil
	}
	perTenant := int(*tn.InstancesPerTenant.Min)
	total := 0
	for _, tenant := range sortedKeys(byTenant) {
		var insts []*v1alpha1.Instance
		for _, in := range byTenant[tenant] {
			if holdsSlot(in) {
				insts = append(insts, in)
			}
		}
		target := s.tenantRevision(tenant)
		if len(insts) > 0 && tn.IdleAfter.Duration > 0 {
			idle := now.Sub(s.tenantLastActive(tenant, claims[tenant]))
			if idle >= tn.IdleAfter.Duration {
				for _, in := range insts {
					// Without its tenant, the instance no longer keeps the tenant active while it goes.
					in.Metadata.Labels = maps.Clone(in.Metadata.Labels)
					delete(in.Metadata.Labels, v1alpha1.LabelTenant)
					s.terminate(in, "")
				}
				s.event(s.object, v1alpha1.EventNormal, "TenantIdle", "tenant %s had no request for %s: deleting its %d instances", tenant, idle.Round(time.Second), len(insts))
				continue
			}
			s.requeueAt(tn.IdleAfter.Duration - idle)
		}
		if len(insts) == 0 {
			var w *v1alpha1.Instance
			if w, warm = takeWarm(warm, target); w != nil {
				// A copy: the record's map is shared with the controller's index until the write.
				w.Metadata.Labels = maps.Clone(w.Metadata.Labels)
				delete(w.Metadata.Labels, LabelWarm)
				w.Metadata.Labels[v1alpha1.LabelTenant] = tenant
				s.mark(w)
				s.event(s.object, v1alpha1.EventNormal, "TenantAssigned", "tenant %s takes warm instance %s", tenant, w.Metadata.Name)
				insts = append(insts, w)
			}
			s.c.settleClaim(fleet, tenant)
		}
		tp := &regionPlan{scope: s.scope, region: s.region, replicas: s.replicas, tenant: tenant, members: insts, tenantDesired: perTenant}
		tp.scale(target)
		total += perTenant
	}
	s.keepWarmPool(warm, int(*tn.WarmPool))
	// The fleet's desired count, in memory, is what its tenants run: status and conditions read it.
	d := int32(total)
	s.fleet.Spec.Replicas = v1alpha1.Replicas{Min: &d, Max: &d, Desired: &d}
	for i := range s.fleet.Spec.Regions {
		s.fleet.Spec.Regions[i].Replicas = nil
	}
}

// tenantLastActive is when a tenant was last active: its latest request through the load balancer,
// its claim, or the controller's start (the load balancer's memory starts with it).
func (s *regionPlan) tenantLastActive(tenant string, claimed time.Time) time.Time {
	last := s.c.started
	if claimed.After(last) {
		last = claimed
	}
	if a := s.c.opts.TenantActivity; a != nil {
		if t := a.TenantLastRequest(s.fleetName(), tenant); t.After(last) {
			last = t
		}
	}
	return last
}

// tenantRevision is the revision a tenant runs: its pin's, or the fleet's.
func (s *regionPlan) tenantRevision(tenant string) string {
	pin, ok := s.stored.Requests.TenantPins[tenant]
	if !ok || pin.Digest == "" {
		return s.revision
	}
	f := *s.fleet
	f.Spec.Image = pin.Digest
	rev := RevisionName(&f)
	if s.pinnedImages == nil {
		s.pinnedImages = map[string]string{}
	}
	s.pinnedImages[rev] = pin.Digest
	return rev
}

// takeWarm takes the best warm instance of revision rev for a tenant: a ready one, else the
// oldest booting one. It returns the instance (nil if none fits) and the pool without it.
func takeWarm(warm []*v1alpha1.Instance, rev string) (*v1alpha1.Instance, []*v1alpha1.Instance) {
	best := -1
	for i, in := range warm {
		if in.Spec.Revision != rev || !active(in) {
			continue
		}
		if best < 0 || (ready(in) && !ready(warm[best])) || (ready(in) == ready(warm[best]) && created(in).Before(created(warm[best]))) {
			best = i
		}
	}
	if best < 0 {
		return nil, warm
	}
	w := warm[best]
	return w, slices.Delete(slices.Clone(warm), best, best+1)
}

// keepWarmPool keeps want warm instances of the fleet's revision: others go, missing ones are
// created within the reconcile's bound on creates.
func (s *regionPlan) keepWarmPool(warm []*v1alpha1.Instance, want int) {
	var cur []*v1alpha1.Instance
	for _, in := range warm {
		if in.Spec.Revision != s.revision {
			s.terminate(in, "") // a warm instance of an older revision would give a tenant the old one
			continue
		}
		cur = append(cur, in)
	}
	if extra := len(cur) - want; extra > 0 {
		sort.Slice(cur, func(i, j int) bool { return !ready(cur[i]) && ready(cur[j]) })
		for _, in := range cur[:extra] {
			s.terminate(in, "")
		}
		return
	}
	creating := 0
	for _, in := range s.records {
		if in.Status.Phase == v1alpha1.PhasePending && s.dirty[in.Metadata.Name] {
			creating++
		}
	}
	n := min(want-len(cur), s.c.opts.MaxConcurrentCreates-creating)
	if n <= 0 {
		return
	}
	image := s.imageOf(s.revision)
	for range n {
		in := s.newRecordOf(s.placement(), s.revision, image)
		in.Metadata.Labels[LabelWarm] = "true"
	}
	s.event(s.object, v1alpha1.EventNormal, "WarmPoolRefill", "creating %d warm instances of revision %s (warm pool %d)", n, s.revision, want)
}
