package controller

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// RevisionStats are what the load balancer counted for one revision's target group since a time.
type RevisionStats struct {
	// Requests is the number of finished requests.
	Requests uint64
	// Errors5xx is how many of them failed with a 5xx answer or could not be served.
	Errors5xx uint64
	// LatencyP95 is their 95th percentile latency.
	LatencyP95 time.Duration
}

// StatsSource reports per-revision figures for canary analysis: the load balancer.
type StatsSource interface {
	// RevisionStats returns the figures of a fleet's revision since the given time, and whether the
	// load balancer knows the revision.
	RevisionStats(fleet, revision string, since time.Time) (RevisionStats, bool)
}

// RegionStatsSource MAY be implemented by a StatsSource that counts each region apart (a load
// balancer per region): a canary in a wave across regions is then judged against the stable
// revision of its own region, whose users and distance it shares.
type RegionStatsSource interface {
	// RegionRevisionStats is RevisionStats for the instances of one region.
	RegionRevisionStats(fleet, region, revision string, since time.Time) (RevisionStats, bool)
}

// revisionStats returns a revision's figures since a time: of the region planned when
// the fleet runs in several regions and the source counts regions apart, else of the fleet.
func (s *regionPlan) revisionStats(rev string, since time.Time) (RevisionStats, bool) {
	if rs, ok := s.c.opts.Stats.(RegionStatsSource); ok && s.multiRegion() {
		return rs.RegionRevisionStats(s.fleetName(), s.region.Name, rev, since)
	}
	return s.c.opts.Stats.RevisionStats(s.fleetName(), rev, since)
}

// Event reasons of rollouts.
const (
	ReasonRolloutStarted    = "RolloutStarted"
	ReasonRolloutSwitched   = "RolloutSwitched"
	ReasonCanaryStep        = "CanaryStep"
	ReasonRolloutSucceeded  = "RolloutSucceeded"
	ReasonRolloutRolledBack = "RolloutRolledBack"
	ReasonRolloutPromoted   = "RolloutPromoted"
)

// Analysis floors: a canary whose 5xx rate is under analysisMinErrorRate, or whose p95 latency is
// within analysisMinLatencyDelta of the stable one, is never judged worse, so that one stray error
// or loopback jitter does not roll a good revision back.
const (
	analysisMinErrorRate    = 0.01
	analysisMinLatencyDelta = 10 * time.Millisecond
	maxHistory              = 10
)

// analysisVerdict is the outcome of comparing a canary with the stable revision.
type analysisVerdict struct {
	// Judged is false while either side has fewer requests than the analysis' minimum.
	Judged bool
	// Failed is true when the canary is worse than allowed; Reason says how.
	Failed bool
	Reason string
}

// analyze compares the canary's figures with the stable revision's. It is a pure function.
func analyze(a v1alpha1.CanaryAnalysis, canary, stable RevisionStats) analysisVerdict {
	minReq := uint64(max(a.MinRequests, 1))
	if canary.Requests < minReq || stable.Requests < minReq {
		return analysisVerdict{Reason: fmt.Sprintf("waiting for %d requests on each side (canary %d, stable %d)", minReq, canary.Requests, stable.Requests)}
	}
	cRate := float64(canary.Errors5xx) / float64(canary.Requests)
	sRate := float64(stable.Errors5xx) / float64(stable.Requests)
	if a.MaxErrorRateRatio > 0 && cRate >= analysisMinErrorRate && cRate > sRate*a.MaxErrorRateRatio {
		return analysisVerdict{Judged: true, Failed: true, Reason: fmt.Sprintf("canary 5xx rate %.1f%% exceeds %.1fx the stable %.1f%% (%d/%d requests)",
			100*cRate, a.MaxErrorRateRatio, 100*sRate, canary.Errors5xx, canary.Requests)}
	}
	if a.MaxLatencyRatio > 0 && canary.LatencyP95-stable.LatencyP95 > analysisMinLatencyDelta &&
		float64(canary.LatencyP95) > float64(stable.LatencyP95)*a.MaxLatencyRatio {
		return analysisVerdict{Judged: true, Failed: true, Reason: fmt.Sprintf("canary p95 latency %s exceeds %.2fx the stable %s",
			canary.LatencyP95, a.MaxLatencyRatio, stable.LatencyP95)}
	}
	return analysisVerdict{Judged: true, Reason: fmt.Sprintf("canary 5xx %.1f%% vs %.1f%%, p95 %s vs %s", 100*cRate, 100*sRate, canary.LatencyP95, stable.LatencyP95)}
}

// servingRevision is the revision that carried the traffic when ro was last written.
func servingRevision(ro *v1alpha1.RolloutStatus) string {
	switch {
	case ro == nil:
		return ""
	case ro.Phase == v1alpha1.RolloutSucceeded:
		return ro.Revision
	case ro.Strategy == v1alpha1.StrategyBlueGreen && ro.Step >= 1 && ro.Phase != v1alpha1.RolloutRolledBack:
		return ro.Revision
	default:
		return ro.PreviousRevision
	}
}

// rollout runs the BlueGreen and Canary strategies in place of scale(). It reports false when the
// fleet is not in such a rollout, and scale() applies instead. Its progress is kept in s.ro, which
// writeStatus stores, so a restarted controller resumes from the stored step.
func (s *regionPlan) rollout() bool {
	strategy := s.fleet.Spec.Rollout.Strategy
	now := s.c.clock.Now().UTC()
	if s.ro == nil || s.ro.Revision != s.revision {
		if strategy != v1alpha1.StrategyBlueGreen && strategy != v1alpha1.StrategyCanary {
			return false
		}
		stable := s.stableRevision()
		if stable == "" {
			return false // nothing serves yet: the first instances are simply created
		}
		// A request already recorded was given before this rollout began: it is not for this one.
		s.ro = &v1alpha1.RolloutStatus{Revision: s.revision, PreviousRevision: stable, Strategy: strategy, Phase: v1alpha1.RolloutProgressing, HandledRequest: s.stored.Requests.Rollout}
		s.statusEvent(s.object, v1alpha1.EventNormal, ReasonRolloutStarted, "%s rollout from %s to %s", strategy, stable, s.revision)
	}
	ro := s.ro
	if req := s.stored.Requests.Rollout; req != nil && req.Revision == ro.Revision && !req.Equal(ro.HandledRequest) {
		ro.HandledRequest = req
		s.command(ro, req.Command, now)
	}
	switch ro.Phase {
	case v1alpha1.RolloutSucceeded, v1alpha1.RolloutFailed:
		return false
	case v1alpha1.RolloutRolledBack:
		// The stable revision keeps serving until the spec names another revision.
		ro.Weights = nil
		s.scaleRevision(ro.PreviousRevision, s.desired())
		s.terminateOthers(ro.PreviousRevision)
		return true
	}
	if ro.Strategy == v1alpha1.StrategyBlueGreen {
		s.blueGreen(ro, now)
	} else {
		s.canary(ro, now)
	}
	return true
}

// loadRollout starts s.ro from the stored rollout state, so that a reconcile that decides nothing
// about it (a region that did not answer) keeps it.
func (s *scope) loadRollout() {
	s.ro = copyRollout(s.stored.Status.Rollout)
}

// copyRollout returns a copy of ro that shares nothing with it, or nil.
func copyRollout(ro *v1alpha1.RolloutStatus) *v1alpha1.RolloutStatus {
	if ro == nil {
		return nil
	}
	cp := *ro
	cp.Weights = maps.Clone(ro.Weights)
	return &cp
}

// command carries out a user's promote or abort of a rollout in progress; on a rollout that has
// ended it does nothing (the API refuses those, but the rollout may have ended meanwhile).
func (s *regionPlan) command(ro *v1alpha1.RolloutStatus, cmd string, now time.Time) {
	if !ro.InProgress() {
		return
	}
	switch cmd {
	case v1alpha1.RolloutAbort:
		s.rollback(ro, "aborted by user")
	case v1alpha1.RolloutPromote:
		ro.Phase = v1alpha1.RolloutProgressing
		if ro.Strategy == v1alpha1.StrategyCanary {
			if steps := int32(len(s.fleet.Spec.Rollout.Steps)); ro.Step < steps {
				ro.Step, ro.StepStartedAt = steps, nil
			}
			if _, ok := ro.Weights[ro.Revision]; !ok {
				// No step had started: the new revision has had no traffic, and gets none until
				// its full set serves.
				ro.Weights = map[string]int32{ro.Revision: 0, ro.PreviousRevision: 100}
			}
		} else if ro.Step >= 1 {
			// Switched already: the rollback window ends now.
			start := now.Add(-s.fleet.Spec.Rollout.RollbackWindow.Duration)
			ro.StepStartedAt = &start
		}
		s.statusEvent(s.object, v1alpha1.EventNormal, ReasonRolloutPromoted, "promoted by user: all traffic to %s once its instances serve", ro.Revision)
	}
}

// stableRevision picks the revision a new rollout starts from: the one that was serving, if it
// still has ready instances, else the older revision with the most ready instances.
func (s *scope) stableRevision() string {
	readyOf := map[string]int{}
	for _, in := range s.records {
		if ready(in) {
			readyOf[in.Spec.Revision]++
		}
	}
	if r := servingRevision(s.stored.Status.Rollout); r != "" && r != s.revision && readyOf[r] > 0 {
		return r
	}
	if r := s.stored.Status.CurrentRevision; r != "" && r != s.revision && readyOf[r] > 0 {
		return r
	}
	best, bestN := "", 0
	for _, r := range slices.Sorted(maps.Keys(readyOf)) {
		if n := readyOf[r]; r != s.revision && n > bestN {
			best, bestN = r, n
		}
	}
	return best
}

// serving counts a revision's instances that are ready and, when the load balancer judges the
// fleet, healthy in it.
func (s *regionPlan) serving(rev string) int {
	n := 0
	for _, in := range s.scoped() {
		if in.Spec.Revision == rev && s.serves(in) {
			n++
		}
	}
	return n
}

// imageOf returns the image of a revision, from its instances or the fleet's history.
func (s *scope) imageOf(rev string) string {
	if rev == s.revision {
		return s.fleet.Spec.Image
	}
	if image, ok := s.pinnedImages[rev]; ok {
		return image
	}
	for _, in := range s.records {
		if in.Spec.Revision == rev {
			return in.Spec.Image
		}
	}
	for _, h := range s.stored.Status.History {
		if h.Revision == rev {
			return h.Image
		}
	}
	return ""
}

// scaleRevision creates or deletes instances of one revision until it has n of them (failed ones
// count until healing replaces them).
func (s *regionPlan) scaleRevision(rev string, n int) {
	var list []*v1alpha1.Instance
	for _, in := range s.scoped() {
		if in.Spec.Revision == rev && holdsSlot(in) {
			list = append(list, in)
		}
	}
	if create := min(n-len(list), s.c.opts.MaxConcurrentCreates); create > 0 {
		image := s.imageOf(rev)
		if image == "" {
			s.errs = append(s.errs, fmt.Errorf("revision %s: image unknown, cannot create its instances", rev))
			return
		}
		region := s.placement()
		for range create {
			s.newRecordOf(region, rev, image)
		}
		s.event(s.object, v1alpha1.EventNormal, "ScalingUp", "creating %d instances of revision %s%s (want %d)", create, rev, s.where(), n)
	}
	if extra := len(list) - n; extra > 0 {
		sortForRemoval(list)
		for _, in := range list[:extra] {
			s.terminate(in, "")
		}
	}
}

// terminateOthers deletes every instance not of one of the revisions keep.
func (s *regionPlan) terminateOthers(keep ...string) {
	for _, in := range s.scoped() {
		if holdsSlot(in) && !slices.Contains(keep, in.Spec.Revision) {
			s.terminate(in, "")
		}
	}
}

// blueGreen builds a full set of the new revision beside the old, switches all traffic in one load
// balancer update once every new instance serves, and deletes the old set after the rollback window.
func (s *regionPlan) blueGreen(ro *v1alpha1.RolloutStatus, now time.Time) {
	desired := s.desired()
	s.scaleRevision(ro.Revision, desired)
	if ro.Step == 0 {
		s.scaleRevision(ro.PreviousRevision, desired)
		s.terminateOthers(ro.Revision, ro.PreviousRevision)
		ro.Weights = map[string]int32{ro.PreviousRevision: 100, ro.Revision: 0}
		if n := s.serving(ro.Revision); n < desired {
			ro.Message = fmt.Sprintf("%d/%d instances of %s serving", n, desired, ro.Revision)
			return
		}
		ro.Step, ro.StepStartedAt = 1, &now
		s.statusEvent(s.object, v1alpha1.EventNormal, ReasonRolloutSwitched, "all traffic switched from %s to %s%s", ro.PreviousRevision, ro.Revision, s.where())
	}
	ro.Weights = map[string]int32{ro.Revision: 100, ro.PreviousRevision: 0}
	s.terminateOthers(ro.Revision, ro.PreviousRevision)
	end := ro.StepStartedAt.Add(s.fleet.Spec.Rollout.RollbackWindow.Duration)
	if now.Before(end) {
		ro.Message = fmt.Sprintf("switched to %s; %s kept until %s", ro.Revision, ro.PreviousRevision, end.Format(time.RFC3339))
		s.requeueAt(end.Sub(now))
		return
	}
	s.terminateOthers(ro.Revision)
	ro.Weights, ro.Phase, ro.Message = nil, v1alpha1.RolloutSucceeded, "rollback window over; "+ro.PreviousRevision+" deleted"
	s.statusEvent(s.object, v1alpha1.EventNormal, ReasonRolloutSucceeded, "%s rolled out%s; %s deleted", ro.Revision, s.where(), ro.PreviousRevision)
}

// canary moves traffic to the new revision step by step, analysing it against the stable revision
// during each step, and rolls back on the first failed analysis.
func (s *regionPlan) canary(ro *v1alpha1.RolloutStatus, now time.Time) {
	spec := s.fleet.Spec.Rollout
	desired := s.desired()
	steps := spec.Steps
	s.terminateOthers(ro.Revision, ro.PreviousRevision)
	prevWeight := int32(0)
	if ro.Step > 0 && int(ro.Step) <= len(steps) {
		prevWeight = steps[ro.Step-1].Weight
	}
	setWeight := func(w int32) {
		ro.Weights = map[string]int32{ro.Revision: w, ro.PreviousRevision: 100 - w}
	}
	if int(ro.Step) >= len(steps) {
		// Promotion: a full set of the new revision, then all traffic to it and the old set goes.
		s.scaleRevision(ro.Revision, desired)
		s.scaleRevision(ro.PreviousRevision, desired)
		// The weight in force holds until the full set serves: the last step's, or the step a
		// user's promote cut short.
		if w, ok := ro.Weights[ro.Revision]; ok {
			prevWeight = w
		}
		setWeight(prevWeight)
		if n := s.serving(ro.Revision); n < desired {
			ro.Message = fmt.Sprintf("promoting: %d/%d instances of %s serving", n, desired, ro.Revision)
			return
		}
		s.terminateOthers(ro.Revision)
		ro.Weights, ro.Phase, ro.Message = nil, v1alpha1.RolloutSucceeded, "all traffic on "+ro.Revision
		s.statusEvent(s.object, v1alpha1.EventNormal, ReasonRolloutSucceeded, "canary %s promoted%s; %s deleted", ro.Revision, s.where(), ro.PreviousRevision)
		return
	}
	step := steps[ro.Step]
	want := max(1, (desired*int(step.Weight)+99)/100)
	s.scaleRevision(ro.Revision, want)
	s.scaleRevision(ro.PreviousRevision, desired)
	if ro.StepStartedAt == nil {
		setWeight(prevWeight)
		if n := s.serving(ro.Revision); n < want {
			ro.Message = fmt.Sprintf("step %d/%d: %d/%d canary instances serving", ro.Step+1, len(steps), n, want)
			return
		}
		ro.StepStartedAt = &now
		s.statusEvent(s.object, v1alpha1.EventNormal, ReasonCanaryStep, "step %d/%d: %d%% of traffic to %s%s", ro.Step+1, len(steps), step.Weight, ro.Revision, s.where())
	}
	setWeight(step.Weight)
	v := analysisVerdict{Reason: "no load balancer statistics"}
	if s.c.opts.Stats != nil {
		c, okC := s.revisionStats(ro.Revision, *ro.StepStartedAt)
		st, okS := s.revisionStats(ro.PreviousRevision, *ro.StepStartedAt)
		if okC && okS {
			v = analyze(*spec.Analysis, c, st)
		}
	}
	if v.Failed {
		s.rollback(ro, v.Reason)
		return
	}
	ro.Message = fmt.Sprintf("step %d/%d at %d%%: %s", ro.Step+1, len(steps), step.Weight, v.Reason)
	end := ro.StepStartedAt.Add(step.Pause.Duration)
	if now.Before(end) {
		s.requeueAt(min(end.Sub(now), s.c.opts.PollInterval))
		return
	}
	// A step ends only once the analysis has judged it, or a canary that saw too little traffic
	// (or whose figures a restart of the load balancer reset) would be promoted unexamined. A
	// fleet with no listener or no load balancer has nothing to judge: its pauses alone count.
	if s.c.opts.Stats != nil && len(s.fleet.Spec.Listeners) > 0 && !v.Judged {
		ro.Message = fmt.Sprintf("step %d/%d at %d%%: pause over, but the analysis is %s (herd rollout promote skips it)", ro.Step+1, len(steps), step.Weight, v.Reason)
		s.requeueAt(s.c.opts.PollInterval)
		return
	}
	ro.Step++
	ro.StepStartedAt = nil
	s.requeueAt(time.Millisecond)
}

// rollback sends all traffic back to the stable revision and deletes the new revision's instances.
func (s *regionPlan) rollback(ro *v1alpha1.RolloutStatus, reason string) {
	ro.Phase, ro.Message = v1alpha1.RolloutRolledBack, reason
	ro.Weights = nil
	ro.StepStartedAt = nil
	s.terminateOthers(ro.PreviousRevision)
	s.statusEvent(s.object, v1alpha1.EventWarning, ReasonRolloutRolledBack, "rolled back from %s to %s%s: %s", ro.Revision, ro.PreviousRevision, s.where(), reason)
}

// requeueAt asks for the fleet to be looked at again within d.
func (s *scope) requeueAt(d time.Duration) {
	if d <= 0 {
		d = time.Millisecond
	}
	s.requeue = sooner(s.requeue, d)
}

// weights returns the revision weights the load balancer should apply, nil for proportional.
func (s *scope) weights() map[string]int32 {
	if !s.ro.InProgress() {
		return nil
	}
	return s.ro.Weights
}

// history returns the fleet's revision history with the serving revision on top.
func (s *scope) history(now time.Time) []v1alpha1.RevisionHistory {
	h := append([]v1alpha1.RevisionHistory(nil), s.stored.Status.History...)
	serving := s.revision
	if s.ro != nil && s.ro.Revision == s.revision && s.ro.Phase != v1alpha1.RolloutSucceeded {
		serving = servingRevision(s.ro)
	}
	if serving == "" || len(h) > 0 && h[0].Revision == serving {
		return h
	}
	image := s.imageOf(serving)
	if len(h) > 0 && h[0].Until == nil {
		h[0].Until = &now
	}
	entry := v1alpha1.RevisionHistory{Revision: serving, Image: image, Since: now}
	if pin := s.stored.Pinned; pin != nil && serving == s.revision {
		entry.Ref, entry.PinnedBy = pin.Ref, pin.By
	}
	h = append([]v1alpha1.RevisionHistory{entry}, h...)
	if len(h) > maxHistory {
		h = h[:maxHistory]
	}
	return h
}
