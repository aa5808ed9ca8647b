package controller

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// Event reasons of waves across regions.
const (
	ReasonWaveRegion = "WaveRegion"
)

// A fleet in several regions takes a new revision in waves: one region at a time, in
// spec.rollout.regionOrder, the fleet's strategy (Rolling, BlueGreen or Canary) applied inside the
// region. The regions the wave has not reached keep their revision; a canary that fails in one
// region rolls the whole wave back, so the regions after it never run the new revision. The
// wave's state is the fleet's status.rollout (revision, previous revision, phase) and each
// region's status.regions[].rollout (its phase, step and weights), so a restarted controller
// resumes at the region and step it had reached.

// wave plans a fleet in several regions: every region is scaled on its own, and a revision change
// moves through the regions as a wave.
func (s *scope) wave() {
	now := s.c.clock.Now().UTC()
	s.startWave()
	ro := s.ro
	waving := ro != nil && ro.Revision == s.revision && ro.Phase != v1alpha1.RolloutSucceeded && ro.Phase != v1alpha1.RolloutFailed
	if !waving {
		for _, name := range s.fleet.RegionOrder() {
			if r := s.regions[name]; !r.frozen() {
				s.in(r).scale(s.revision)
			}
		}
		return
	}
	req := s.stored.Requests.Rollout
	newReq := req != nil && req.Revision == ro.Revision && !req.Equal(ro.HandledRequest)
	if newReq {
		ro.HandledRequest = req
		if req.Command == v1alpha1.RolloutAbort && ro.InProgress() {
			s.rollbackWave("", "aborted by user")
		}
	}
	order := s.fleet.RegionOrder()
	reached := true // every region before this one has the new revision
	active := ""
	for i, name := range order {
		r := s.regions[name]
		rr := r.rollout
		if r.frozen() {
			reached = reached && rr.Phase == v1alpha1.RolloutSucceeded
			continue // nothing is known of it: it is left as it is, and the wave waits for it
		}
		rp := s.in(r)
		switch {
		case ro.Phase == v1alpha1.RolloutRolledBack:
			r.target = rr.PreviousRevision
			rp.scale(r.target)
		case rr.Phase == v1alpha1.RolloutSucceeded:
			rp.scale(s.revision)
		case reached:
			active = name
			reached = false
			if rr.Phase == v1alpha1.RolloutWaiting {
				rr.Phase, rr.Step, rr.StepStartedAt, rr.Message = v1alpha1.RolloutProgressing, 0, nil, ""
				s.statusEvent(s.object, v1alpha1.EventNormal, ReasonWaveRegion, "wave %d/%d: rolling %s out in region %s", i+1, len(order), ro.Revision, name)
			}
			if newReq && req.Command == v1alpha1.RolloutPromote {
				rp.command(rr, req.Command, now)
			}
			if r.unreachable != "" {
				// Users cannot reach the region: its figures say nothing of the revision. The
				// wave holds until they can.
				r.target = rr.PreviousRevision
				rr.Message = "held: the region is unreachable: " + r.unreachable
				break
			}
			rp.waveStep(rr, now)
			if rr.Phase == v1alpha1.RolloutRolledBack {
				s.rollbackWave(name, rr.Message)
				r.target = rr.PreviousRevision
			} else if rr.Phase == v1alpha1.RolloutSucceeded {
				reached = true // the next region starts in the same pass
				s.statusEvent(s.object, v1alpha1.EventNormal, ReasonWaveRegion, "wave %d/%d: region %s runs %s", i+1, len(order), name, ro.Revision)
			}
		default:
			r.target = rr.PreviousRevision
			rp.scale(r.target)
		}
	}
	s.summariseWave(order, active)
}

// startWave loads the wave of the current revision from the stored status, or starts one when
// the revision changed while an older one serves.
func (s *scope) startWave() {
	if s.ro != nil && s.ro.Revision == s.revision {
		for _, name := range s.fleet.RegionOrder() {
			r := s.regions[name]
			if st := s.stored.Status.RegionStatusOf(name); st != nil && st.Rollout != nil && st.Rollout.Revision == s.revision {
				r.rollout = copyRollout(st.Rollout)
			} else {
				// A region added during the wave: the wave reaches it in its turn.
				r.rollout = s.waitingRollout(name, s.ro.PreviousRevision)
			}
		}
		return
	}
	stable := s.stableRevision()
	if stable == "" {
		return // nothing serves yet: the first instances are simply created everywhere
	}
	strategy := s.fleet.Spec.Rollout.Strategy
	s.ro = &v1alpha1.RolloutStatus{Revision: s.revision, PreviousRevision: stable, Strategy: strategy, Phase: v1alpha1.RolloutProgressing, HandledRequest: s.stored.Requests.Rollout}
	order := s.fleet.RegionOrder()
	for _, name := range order {
		s.regions[name].rollout = s.waitingRollout(name, stable)
	}
	s.statusEvent(s.object, v1alpha1.EventNormal, ReasonRolloutStarted, "%s rollout from %s to %s, region by region: %s", strategy, stable, s.revision, strings.Join(order, ", "))
}

// waitingRollout is a region's part of a new wave: it keeps the revision it serves (the one with
// the most ready instances there, else the fleet's stable one) until the wave reaches it.
func (s *scope) waitingRollout(region, stable string) *v1alpha1.RolloutStatus {
	readyOf := map[string]int{}
	for _, in := range s.records {
		if s.regionOf(in) == region && ready(in) && in.Spec.Revision != s.revision {
			readyOf[in.Spec.Revision]++
		}
	}
	prev, best := stable, readyOf[stable]
	for _, rev := range sortedKeys(readyOf) {
		if readyOf[rev] > best {
			prev, best = rev, readyOf[rev]
		}
	}
	return &v1alpha1.RolloutStatus{Revision: s.revision, PreviousRevision: prev, Strategy: s.fleet.Spec.Rollout.Strategy, Phase: v1alpha1.RolloutWaiting}
}

// waveStep applies the fleet's strategy inside the region planned, the one the wave is
// in.
func (s *regionPlan) waveStep(rr *v1alpha1.RolloutStatus, now time.Time) {
	switch rr.Strategy {
	case v1alpha1.StrategyBlueGreen:
		s.blueGreen(rr, now)
	case v1alpha1.StrategyCanary:
		s.canary(rr, now)
	default:
		s.scale(rr.Revision)
		desired := s.desired()
		readyN, others := 0, 0
		for _, in := range s.scoped() {
			switch {
			case !holdsSlot(in) || IsWarm(in):
			case in.Spec.Revision != rr.Revision:
				others++
			case ready(in):
				readyN++
			}
		}
		if readyN >= desired && others == 0 {
			rr.Phase, rr.Message = v1alpha1.RolloutSucceeded, fmt.Sprintf("%d instances of %s ready", readyN, rr.Revision)
			return
		}
		rr.Message = fmt.Sprintf("%d/%d instances of %s ready, %d of older revisions left", readyN, desired, rr.Revision, others)
	}
}

// rollbackWave ends the wave: every region goes back to the revision it ran before (those the
// wave never reached keep it), failed naming the region where the new revision failed, "" for an
// abort.
func (s *scope) rollbackWave(failed, reason string) {
	ro := s.ro
	ro.Phase, ro.Weights, ro.StepStartedAt = v1alpha1.RolloutRolledBack, nil, nil
	ro.Message = reason
	if failed != "" {
		ro.Message = fmt.Sprintf("region %s: %s", failed, reason)
	}
	for _, name := range s.fleet.RegionOrder() {
		rr := s.regions[name].rollout
		switch rr.Phase {
		case v1alpha1.RolloutWaiting:
			rr.Message = "the wave stopped before this region: it keeps " + rr.PreviousRevision
		case v1alpha1.RolloutRolledBack:
		default:
			rr.Phase, rr.Weights, rr.StepStartedAt, rr.Message = v1alpha1.RolloutRolledBack, nil, nil, "rolled back with the wave: "+ro.Message
		}
	}
	s.statusEvent(s.object, v1alpha1.EventWarning, ReasonRolloutRolledBack, "wave of %s rolled back to %s: %s", ro.Revision, ro.PreviousRevision, ro.Message)
	s.requeueAt(time.Millisecond)
}

// summariseWave sets the fleet's rollout from its regions': the phase, a message naming the region
// the wave is in, and the weights a load balancer over every region applies.
func (s *scope) summariseWave(order []string, active string) {
	ro := s.ro
	done := 0
	for _, name := range order {
		if s.regions[name].rollout.Phase == v1alpha1.RolloutSucceeded {
			done++
		}
	}
	switch {
	case ro.Phase == v1alpha1.RolloutRolledBack:
	case done == len(order):
		ro.Phase, ro.Weights, ro.Message = v1alpha1.RolloutSucceeded, nil, fmt.Sprintf("%s runs in every region", ro.Revision)
		s.statusEvent(s.object, v1alpha1.EventNormal, ReasonRolloutSucceeded, "%s rolled out in every region (%s)", ro.Revision, strings.Join(order, ", "))
	case active != "":
		rr := s.regions[active].rollout
		ro.Phase = v1alpha1.RolloutProgressing
		if rr.Phase == v1alpha1.RolloutPaused {
			ro.Phase = v1alpha1.RolloutPaused
		}
		ro.Message = fmt.Sprintf("region %s (%d/%d done): %s", active, done, len(order), rr.Message)
		ro.Weights = s.blendWeights()
	default:
		ro.Message = fmt.Sprintf("%d/%d regions done; waiting for a region whose provider does not answer", done, len(order))
		ro.Weights = s.blendWeights()
	}
}

// blendWeights returns each revision's share of the traffic a load balancer over every region
// gives it: each region's weights (its rollout's, or all to the revision it runs) counted by the
// region's share of the fleet's desired instances. nil while no region sets weights, for traffic
// in proportion to instances.
func (s *scope) blendWeights() map[string]int32 {
	set := false
	for _, rg := range s.fleet.Spec.Regions {
		if rr := s.regions[rg.Name].rollout; rr.InProgress() && rr.Weights != nil {
			set = true
		}
	}
	total := s.totalDesired()
	if !set || total == 0 {
		return nil
	}
	acc := map[string]float64{}
	for _, rg := range s.fleet.Spec.Regions {
		r := s.regions[rg.Name]
		share := float64(*s.fleet.RegionReplicas(rg.Name).Desired) / float64(total)
		w := map[string]int32{r.target: 100}
		if rr := r.rollout; rr.InProgress() && rr.Weights != nil {
			w = rr.Weights
		}
		for rev, x := range w {
			acc[rev] += share * float64(x)
		}
	}
	out := map[string]int32{}
	sum := int32(0)
	revs := sortedKeys(acc)
	for _, rev := range revs {
		out[rev] = int32(math.Round(acc[rev]))
		sum += out[rev]
	}
	// Rounding may leave the sum off 100: the largest share takes the difference.
	sort.SliceStable(revs, func(i, j int) bool { return acc[revs[i]] > acc[revs[j]] })
	out[revs[0]] += 100 - sum
	return out
}
