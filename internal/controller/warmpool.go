package controller

import (
	"maps"
	"sort"

	"herd.dev/herd/api/v1alpha1"
)

// LabelWarm marks an instance of the warm pool (spec.autoscaling.warmPool): booted, of the current
// revision, and out of rotation; the load balancer gets no target for it. A scale-out takes warm
// instances first, by removing the label, which makes them targets at once.
const LabelWarm = "herd.dev/warm"

// IsWarm reports whether an instance is in its fleet's warm pool.
func IsWarm(in *v1alpha1.Instance) bool { return in.Metadata.Labels[LabelWarm] == "true" }

func (s *scope) warmPoolSize() int {
	if as := s.fleet.Spec.Autoscaling; as != nil {
		return int(as.WarmPool)
	}
	return 0
}

// splitWarm separates the warm pool from the serving instances of a list.
func splitWarm(list []*v1alpha1.Instance) (serving, warm []*v1alpha1.Instance) {
	for _, in := range list {
		if IsWarm(in) {
			warm = append(warm, in)
		} else {
			serving = append(serving, in)
		}
	}
	return serving, warm
}

// promoteWarm moves up to n warm instances into rotation, ready ones first (then the oldest), and
// returns the promoted ones and the warm instances left. Failed ones stay for healing to replace.
func (s *regionPlan) promoteWarm(warm []*v1alpha1.Instance, n int) (promoted, left []*v1alpha1.Instance) {
	usable := 0
	for _, in := range warm {
		if active(in) {
			usable++
		}
	}
	sort.Slice(warm, func(i, j int) bool {
		if active(warm[i]) != active(warm[j]) {
			return active(warm[i])
		}
		if ready(warm[i]) != ready(warm[j]) {
			return ready(warm[i])
		}
		return created(warm[i]).Before(created(warm[j]))
	})
	n = min(n, usable)
	for _, in := range warm[:n] {
		// A copy: the record's map is shared with the controller's index until the write.
		in.Metadata.Labels = maps.Clone(in.Metadata.Labels)
		delete(in.Metadata.Labels, LabelWarm)
		s.mark(in)
	}
	if n > 0 {
		s.event(s.object, v1alpha1.EventNormal, "WarmPoolUsed", "%d warm instances put into rotation%s", n, s.where())
	}
	return warm[:n], warm[n:]
}

// refillWarm creates warm instances of revision target up to the pool's size, or deletes extra
// ones. budget bounds the creations.
func (s *regionPlan) refillWarm(warm []*v1alpha1.Instance, target string, budget int) {
	want := s.warmPoolSize()
	if extra := len(warm) - want; extra > 0 {
		// Keep the ready ones.
		sort.Slice(warm, func(i, j int) bool { return !ready(warm[i]) && ready(warm[j]) })
		for _, in := range warm[:extra] {
			s.terminate(in, "")
		}
		s.event(s.object, v1alpha1.EventNormal, "WarmPoolShrunk", "deleting %d warm instances%s (warm pool %d)", extra, s.where(), want)
		return
	}
	n := min(want-len(warm), budget)
	if n <= 0 {
		return
	}
	region, image := s.placement(), s.imageOf(target)
	for range n {
		in := s.newRecordOf(region, target, image)
		in.Metadata.Labels[LabelWarm] = "true"
	}
	s.event(s.object, v1alpha1.EventNormal, "WarmPoolRefill", "creating %d warm instances of revision %s%s (warm pool %d)", n, target, s.where(), want)
}
