package controller

import (
	"fmt"
	"sort"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// scale creates and deletes instances of the region planned so that revision target
// has the desired count, moving from older revisions as a rolling update bounded by maxSurge and
// maxUnavailable.
func (s *regionPlan) scale(target string) {
	spec := s.fleet.Spec
	desired := s.desired()
	maxSurge := int(*spec.Rollout.MaxSurge)
	maxUnavailable := int(*spec.Rollout.MaxUnavailable)

	var cur, old []*v1alpha1.Instance
	for _, in := range s.scoped() {
		if !holdsSlot(in) {
			continue
		}
		if in.Spec.Revision == target {
			cur = append(cur, in)
		} else {
			old = append(old, in)
		}
	}
	// The warm pool stands apart: a shortfall is first made up from it, and it is refilled after.
	cur, warm := splitWarm(cur)
	if need := desired - len(cur); need > 0 && len(warm) > 0 {
		var promoted []*v1alpha1.Instance
		promoted, warm = s.promoteWarm(warm, need)
		cur = append(cur, promoted...)
	}

	toCreate := desired - len(cur)
	if len(old) > 0 {
		toCreate = min(toCreate, desired+maxSurge-len(cur)-len(old))
	}
	toCreate = min(toCreate, s.c.opts.MaxConcurrentCreates)
	if toCreate > 0 {
		image := s.imageOf(target)
		if image == "" {
			s.errs = append(s.errs, fmt.Errorf("revision %s: image unknown, cannot create its instances", target))
			return
		}
		region := s.placement()
		for range toCreate {
			in := s.newRecordOf(region, target, image)
			if s.tenant != "" {
				in.Metadata.Labels[v1alpha1.LabelTenant] = s.tenant
			}
		}
		s.event(s.object, v1alpha1.EventNormal, "ScalingUp", "creating %d instances of revision %s%s (desired %d)", toCreate, target, s.where(), desired)
	}

	if extra := len(cur) - desired; extra > 0 {
		sortForRemoval(cur)
		for _, in := range cur[:extra] {
			s.terminate(in, "")
		}
		s.event(s.object, v1alpha1.EventNormal, "ScalingDown", "deleting %d instances%s (desired %d)", extra, s.where(), desired)
	}
	if len(old) == 0 {
		// Not during a rolling update: warm instances are of the current revision only.
		s.refillWarm(warm, target, s.c.opts.MaxConcurrentCreates-max(toCreate, 0))
	} else if len(warm) > 0 {
		for _, in := range warm {
			s.terminate(in, "")
		}
	}

	if len(old) > 0 {
		// Old instances that are not ready serve nothing and can go at once; ready ones go only
		// while enough ready instances remain.
		readyCount := 0
		for _, in := range append(append([]*v1alpha1.Instance{}, cur...), old...) {
			if ready(in) && in.Status.Phase != v1alpha1.PhaseTerminating {
				readyCount++
			}
		}
		budget := readyCount - (desired - maxUnavailable)
		sortForRemoval(old)
		removed := 0
		for _, in := range old {
			if ready(in) {
				if budget <= 0 {
					continue
				}
				budget--
			}
			s.terminate(in, "")
			removed++
		}
		if removed > 0 {
			s.event(s.object, v1alpha1.EventNormal, "RollingUpdate", "deleting %d instances of older revisions for %s%s", removed, target, s.where())
		}
	}
}

// sortForRemoval orders instances the way they are best removed: those not ready first, then the
// newest.
func sortForRemoval(list []*v1alpha1.Instance) {
	sort.Slice(list, func(i, j int) bool {
		if ready(list[i]) != ready(list[j]) {
			return !ready(list[i])
		}
		return created(list[i]).After(created(list[j]))
	})
}

func created(in *v1alpha1.Instance) time.Time {
	if in.Status.CreatedAt != nil {
		return *in.Status.CreatedAt
	}
	return time.Time{}
}

// newRecordOf records a new instance of revision rev booting image.
func (s *scope) newRecordOf(region v1alpha1.Region, rev, image string) *v1alpha1.Instance {
	name := newInstanceName(s.fleetName(), s.records)
	labels := map[string]string{
		v1alpha1.LabelFleet:    s.fleetName(),
		v1alpha1.LabelRevision: rev,
		v1alpha1.LabelRegion:   region.Name,
	}
	in := &v1alpha1.Instance{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindInstance},
		Metadata: v1alpha1.ObjectMeta{Name: name, Labels: labels},
		Spec: v1alpha1.InstanceSpec{
			Fleet: s.fleetName(), Revision: rev, Region: region.Name, Provider: region.Provider, Image: image,
		},
		Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhasePending},
	}
	s.records[name] = in
	s.mark(in)
	return in
}
