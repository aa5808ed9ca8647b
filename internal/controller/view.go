package controller

import (
	"sort"

	"herd.dev/herd/api/v1alpha1"
)

// The controller offers a read-only view of its instance records to other loops (the autoscaler's
// InstanceView, the agents' scraper): figures and copies, never the records themselves.

// InstanceCounts returns how many of a fleet's instances serve and how many are on their way.
// Warm-pool instances are in neither: out of rotation, they are not capacity until taken.
func (c *Controller) InstanceCounts(fleet string) (ready, booting int) {
	return c.countInstances(fleet, "")
}

// RegionInstanceCounts is InstanceCounts for the instances of one region of the fleet, for the
// autoscaler, which scales each region of a fleet in several regions on its own.
func (c *Controller) RegionInstanceCounts(fleet, region string) (ready, booting int) {
	return c.countInstances(fleet, region)
}

// countInstances counts a fleet's serving and coming instances, of one region unless region is "".
func (c *Controller) countInstances(fleet, region string) (ready, booting int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, in := range c.instances[fleet] {
		if IsWarm(in) || (region != "" && in.Spec.Region != region) {
			continue
		}
		switch in.Status.Phase {
		case v1alpha1.PhaseReady:
			ready++
		case v1alpha1.PhasePending, v1alpha1.PhaseBooting:
			booting++
		}
	}
	return ready, booting
}

// ServingInstance is a ready, in-rotation instance with what names it in metrics.
type ServingInstance struct {
	Fleet, Region, Revision, Name, Address string
}

// ServingInstances returns the ready, in-rotation instances of every fleet, sorted by name: the
// instances whose agents herd up scrapes.
func (c *Controller) ServingInstances() []ServingInstance {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []ServingInstance
	for _, byName := range c.instances {
		for name, in := range byName {
			if !serving(in) {
				continue
			}
			out = append(out, ServingInstance{Fleet: in.Spec.Fleet, Region: in.Spec.Region, Revision: in.Spec.Revision, Name: name, Address: in.Status.Address})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// serving reports whether in is ready, in rotation and reachable.
func serving(in *v1alpha1.Instance) bool {
	return !IsWarm(in) && in.Status.Phase == v1alpha1.PhaseReady && in.Status.Address != ""
}
