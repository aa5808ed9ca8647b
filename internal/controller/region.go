package controller

import (
	"fmt"
	"slices"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
)

// A region is a failure domain: every region of a fleet runs its own group of instances (like one
// Auto Scaling Group per cloud region), which is scaled, healed, given a warm pool and rolled out on
// its own. The controller lists each region on its own, so a region whose provider does not answer
// is left as it is (its records are neither refreshed nor replaced) while the others are
// reconciled in the same pass; it shows as ProviderFailed in status.regions.

// RegionReachability tells whether a region is reachable from where its users are.
type RegionReachability interface {
	// RegionUnreachable returns why the region cannot be reached from outside, and false
	// when it can be or nothing is known yet.
	RegionUnreachable(region string) (why string, unreachable bool)
}

// RegionChanged reconciles, at once, every fleet that runs in region: the region's reachability
// (or anything else about it that status.regions reports) changed. It returns at once.
func (c *Controller) RegionChanged(region string) {
	c.fleetRegions.Range(func(k, v any) bool {
		if slices.Contains(v.([]string), region) {
			c.queue.Add(k.(string))
		}
		return true
	})
}

// regionPlan is planning at work on one region of the fleet. The phases that count, place and
// roll instances (scale, rollout, a wave's step) are its methods, so that the region they see is
// the one they were given.
type regionPlan struct {
	*scope
	region   v1alpha1.Region
	replicas v1alpha1.Replicas // resolved: every field set
	// tenant, when set, narrows the plan to one tenant of a fleet with tenancy (tenancy.go): its
	// instances (members) are the ones scaled, tenantDesired of them, and new ones are its own.
	tenant        string
	members       []*v1alpha1.Instance
	tenantDesired int
}

// regionState is what one reconcile observed of one region of the fleet.
type regionState struct {
	region v1alpha1.Region
	// inSpec is false for a region the spec no longer names but instances still run in.
	inSpec bool
	// listErr is why the region's provider could not list its instances: the region is frozen.
	listErr error
	// providerErr is the first error of this reconcile's creates and deletes in the region.
	providerErr error
	// unreachable says why users cannot reach the region (RegionReachability), "" when they can.
	unreachable string
	// target is the revision the region runs or moves to, as planning decided.
	target string
	// rollout is the region's part of a wave (fleets in several regions only).
	rollout *v1alpha1.RolloutStatus
}

// frozen reports whether nothing may be decided about the region's instances: its provider could
// not say what it runs.
func (r *regionState) frozen() bool { return r != nil && r.listErr != nil }

// regionOf returns the region an instance belongs to: its own, or the fleet's default region for
// an instance recorded without one.
func (s *scope) regionOf(in *v1alpha1.Instance) string {
	if in.Spec.Region != "" || s.fleet == nil {
		return in.Spec.Region
	}
	return s.fleet.DefaultRegion().Name
}

// initRegions notes the regions of the fleet's spec and those its records still run in, each
// with its provider, in the order of the spec (then by name).
func (s *scope) initRegions() {
	s.regions = map[string]*regionState{}
	for _, rg := range s.fleet.Spec.Regions {
		s.regions[rg.Name] = &regionState{region: rg, inSpec: true, target: s.revision}
		s.regionOrder = append(s.regionOrder, rg.Name)
	}
	var extra []string
	for _, in := range s.records {
		name := s.regionOf(in)
		if _, ok := s.regions[name]; !ok {
			s.regions[name] = &regionState{region: v1alpha1.Region{Name: name, Provider: in.Spec.Provider}}
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	s.regionOrder = append(s.regionOrder, extra...)
	var names []string
	for _, name := range s.regionOrder {
		if r := s.regions[name]; r.inSpec {
			names = append(names, name)
			if src := s.c.opts.Reachability; src != nil {
				if why, down := src.RegionUnreachable(name); down {
					r.unreachable = why
					if r.unreachable == "" {
						r.unreachable = "unreachable from outside"
					}
				}
			}
		}
	}
	s.c.fleetRegions.Store(s.fleetName(), names)
	s.c.noteKeptRegions(s.fleetName(), s.regions)
}

// listRegions reads what each region's provider runs for the fleet. A region whose provider
// fails is noted (listErr) and its records are left alone; an unknown provider is left to
// callProviders, which says how to start it.
func (s *scope) listRegions() {
	s.observed = map[string]provider.Instance{}
	s.observedBy = map[string]string{}
	for _, name := range s.regionOrder {
		r := s.regions[name]
		p, ok := s.c.opts.Providers[r.region.Provider]
		if !ok {
			continue
		}
		start := time.Now()
		list, err := p.List(s.ctx, provider.ListOptions{Fleet: s.fleetName(), Region: name})
		s.c.observeCall(r.region.Provider, "list", start, err)
		if err != nil {
			r.listErr = fmt.Errorf("region %s: list instances of fleet %s on provider %s: %w", name, s.fleetName(), r.region.Provider, err)
			s.errs = append(s.errs, r.listErr)
			continue
		}
		for _, in := range list {
			if rg := in.Labels[v1alpha1.LabelRegion]; rg != "" && rg != name {
				continue // a provider that does not filter by region: the other region's list has it
			}
			s.observed[in.Name] = in
			s.observedBy[in.Name] = r.region.Provider
		}
	}
}

// frozen reports whether in is in a region whose provider could not list it.
func (s *scope) frozen(in *v1alpha1.Instance) bool {
	return s.regions[s.regionOf(in)].frozen()
}

// in returns the planning of one region.
func (s *scope) in(r *regionState) *regionPlan {
	return &regionPlan{scope: s, region: r.region, replicas: s.fleet.RegionReplicas(r.region.Name)}
}

// inScope reports whether in belongs to the region planned.
func (s *regionPlan) inScope(in *v1alpha1.Instance) bool {
	return s.regionOf(in) == s.region.Name
}

// scoped returns the records of the region planned, by name.
func (s *regionPlan) scoped() []*v1alpha1.Instance {
	if s.tenant != "" {
		return s.members
	}
	var out []*v1alpha1.Instance
	for _, in := range s.sorted() {
		if s.inScope(in) {
			out = append(out, in)
		}
	}
	return out
}

// desired is the number of instances the region planned should run.
func (s *regionPlan) desired() int {
	if s.tenant != "" {
		return s.tenantDesired
	}
	return int(*s.replicas.Desired)
}

// totalDesired sums the desired instances of the spec's regions.
func (s *scope) totalDesired() int32 {
	n := int32(0)
	for _, rg := range s.fleet.Spec.Regions {
		n += *s.fleet.RegionReplicas(rg.Name).Desired
	}
	return n
}

// placement is the region new instances go to: the one planned.
func (s *regionPlan) placement() v1alpha1.Region { return s.region }

// multiRegion reports whether the fleet runs in several regions: its rollouts go in waves and its
// events name the region.
func (s *scope) multiRegion() bool { return len(s.fleet.Spec.Regions) > 1 }

// where names the region planned in an event's message, for fleets in several regions.
func (s *regionPlan) where() string {
	if !s.multiRegion() {
		return ""
	}
	return " in region " + s.region.Name
}

// retireRegions deletes the instances of regions the spec no longer names, once every region of
// the spec serves its desired instances, so that moving a fleet to another region never leaves it
// with less capacity than it had.
func (s *scope) retireRegions() {
	var gone []*v1alpha1.Instance
	for _, in := range s.records {
		if r := s.regions[s.regionOf(in)]; !r.inSpec && !r.frozen() && holdsSlot(in) {
			gone = append(gone, in)
		}
	}
	if len(gone) == 0 {
		return
	}
	for _, name := range s.regionOrder {
		r := s.regions[name]
		if !r.inSpec {
			continue
		}
		readyN := 0
		for _, in := range s.records {
			if s.regionOf(in) == name && in.Spec.Revision == r.target && ready(in) && !IsWarm(in) {
				readyN++
			}
		}
		if readyN < int(*s.fleet.RegionReplicas(name).Desired) {
			return
		}
	}
	for _, in := range gone {
		s.terminate(in, "region "+s.regionOf(in)+" was removed from spec.regions")
	}
	s.event(s.object, v1alpha1.EventNormal, "RegionRemoved", "deleting %d instances of regions no longer in spec.regions", len(gone))
}

// regionStatuses reports each region of the spec: its counts, revision and phase.
func (s *scope) regionStatuses() []v1alpha1.RegionStatus {
	var out []v1alpha1.RegionStatus
	for _, name := range s.regionOrder {
		r := s.regions[name]
		if !r.inSpec {
			continue
		}
		rs := v1alpha1.RegionStatus{Name: name, Desired: *s.fleet.RegionReplicas(name).Desired, CurrentRevision: r.target, Rollout: r.rollout}
		curReady := int32(0)
		for _, in := range s.records {
			if s.regionOf(in) != name || !active(in) || IsWarm(in) {
				continue
			}
			rs.Replicas++
			if s.serves(in) {
				rs.ReadyReplicas++
				if in.Spec.Revision == r.target {
					curReady++
				}
			}
		}
		switch {
		case r.listErr != nil:
			rs.Phase, rs.Message = v1alpha1.RegionProviderFailed, r.listErr.Error()
		case r.providerErr != nil:
			rs.Phase, rs.Message = v1alpha1.RegionProviderFailed, r.providerErr.Error()
		case r.unreachable != "":
			rs.Phase, rs.Message = v1alpha1.RegionUnreachable, r.unreachable
		case r.rollout != nil && r.rollout.Phase == v1alpha1.RolloutRolledBack && r.rollout.Revision == s.revision:
			rs.Phase, rs.Message = v1alpha1.RegionDegraded, fmt.Sprintf("rollout of %s rolled back: %s", r.rollout.Revision, r.rollout.Message)
		case curReady == rs.Desired && rs.Replicas == rs.Desired:
			rs.Phase = v1alpha1.RegionReady
		case rs.Replicas == 0 && rs.Desired > 0:
			rs.Phase, rs.Message = v1alpha1.RegionPending, fmt.Sprintf("0/%d instances", rs.Desired)
		default:
			rs.Phase, rs.Message = v1alpha1.RegionScaling, fmt.Sprintf("%d/%d instances of %s ready", curReady, rs.Desired, r.target)
		}
		out = append(out, rs)
	}
	return out
}
