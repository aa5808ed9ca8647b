package controller

import (
	"fmt"
	"sort"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// healState is what the controller remembers of one fleet's healing between reconciles; the fleet's
// status keeps a copy (status.healing) for after a restart. Reconciles of one fleet never run at
// once, so only the map holding it needs a lock.
type healState struct {
	// replacements are instances created in place of healed ones, until they prove healthy or fail.
	replacements map[string]bool
	// failures counts replacements in a row that failed themselves; backoffUntil holds healing.
	failures     int
	backoffUntil time.Time
	// lastFailure is why the last failed instance failed, until a replacement serves.
	lastFailure string
	// justHealed counts this reconcile's victims, whose replacements scale() creates.
	justHealed int
}

// healState returns the fleet's healing state, taken from the fleet's stored status the first
// time after a start, so that a restart keeps the bound and the backoff.
func (s *scope) healState() *healState {
	if v, ok := s.c.healing.Load(s.fleetName()); ok {
		return v.(*healState)
	}
	st := &healState{replacements: map[string]bool{}}
	if h := s.stored.Status.Healing; h != nil {
		for _, name := range h.Replacements {
			st.replacements[name] = true
		}
		st.failures = int(h.Failures)
		st.lastFailure = h.LastFailure
		if h.BackoffUntil != nil {
			st.backoffUntil = *h.BackoffUntil
		}
	}
	v, _ := s.c.healing.LoadOrStore(s.fleetName(), st)
	return v.(*healState)
}

// status is the part of the healing state worth storing: nil once there is nothing to
// remember.
func (st *healState) status(now time.Time) *v1alpha1.HealingStatus {
	if len(st.replacements) == 0 && st.failures == 0 && !now.Before(st.backoffUntil) && st.lastFailure == "" {
		return nil
	}
	h := &v1alpha1.HealingStatus{Failures: int32(st.failures), LastFailure: st.lastFailure}
	for name := range st.replacements {
		h.Replacements = append(h.Replacements, name)
	}
	sort.Strings(h.Replacements)
	if now.Before(st.backoffUntil) {
		t := st.backoffUntil.UTC()
		h.BackoffUntil = &t
	}
	return h
}

// heal replaces instances the provider reports failed, instances the load balancer reports
// unhealthy for too long, and instances whose error rate stands out from their peers, within the
// fleet's bound on replacements and its backoff. A failed instance held back by the bound or the
// backoff keeps its place in the fleet, so that scale() does not create its replacement behind
// healing's back: that is what keeps a broken image from being booted over and over.
func (s *scope) heal() {
	src := s.lbHealth()
	st := s.healState()
	st.justHealed = 0
	now := s.c.clock.Now()

	failed := func(name, why string) {
		delete(st.replacements, name)
		st.failures++
		d := healBackoff(s.c.opts.HealBackoffBase, s.c.opts.HealBackoffMax, st.failures)
		st.backoffUntil = now.Add(d)
		s.statusEvent(s.object, v1alpha1.EventWarning, ReasonHealingBackoff,
			"replacement instance %s failed too (%s; %d in a row): pausing healing for %s", name, why, st.failures, d)
	}

	// Settle the replacements of earlier reconciles.
	for name := range st.replacements {
		in, ok := s.records[name]
		switch {
		case !ok || in.Status.Phase == v1alpha1.PhaseTerminating:
			delete(st.replacements, name) // gone or scaled away: neither proof nor failure
		case in.Status.Phase == v1alpha1.PhaseFailed:
			failed(name, "the provider reports it failed: "+in.Status.LastError)
		case s.proven(in):
			delete(st.replacements, name)
			st.failures = 0
			st.lastFailure = ""
		}
	}

	// Each region is judged on its own: against its own peers (a region's users and distance
	// shape its error rates), within a bound of its own size. A region users cannot reach keeps
	// instances that fail the load balancer's checks (a partition is not a death); one whose
	// provider did not answer is left alone.
	inputs := map[string][]healInput{}
	anyFailed := false
	for _, in := range s.sorted() {
		switch {
		case in.Status.Phase == v1alpha1.PhaseTerminating, in.Status.Phase == v1alpha1.PhasePending, s.frozen(in):
			continue
		}
		region := s.regionOf(in)
		hi := healInput{Name: in.Metadata.Name, CreatedAt: created(in)}
		if in.Status.Phase == v1alpha1.PhaseFailed {
			hi.Failed = in.Status.LastError
			if hi.Failed == "" {
				hi.Failed = "no reason given by the provider"
			}
			st.lastFailure = fmt.Sprintf("instance %s failed: %s", in.Metadata.Name, hi.Failed)
			anyFailed = true
		} else if r := s.regions[region]; src != nil && (r == nil || r.unreachable == "") {
			hi.State, hi.Since = src.InstanceHealth(in.Metadata.Name)
			hi.Requests, hi.Errors = src.InstanceStats(in.Metadata.Name)
		}
		inputs[region] = append(inputs[region], hi)
	}
	// With no failed instance left and no replacement to prove, the last failure is history (the
	// instance was scaled away): the events keep it.
	if !anyFailed && len(st.replacements) == 0 {
		st.lastFailure = ""
	}
	inProgress := map[string]int{}
	for name := range st.replacements {
		if in, ok := s.records[name]; ok {
			inProgress[s.regionOf(in)]++
		}
	}
	planAll := func() (plan healPlan) {
		for _, region := range sortedKeys(inputs) {
			rp := planHealing(now, s.regionHealPolicy(region), inputs[region], max(inProgress[region], 0), st.backoffUntil)
			plan.Bad = append(plan.Bad, rp.Bad...)
			plan.Replace = append(plan.Replace, rp.Replace...)
			plan.Deferred += rp.Deferred
			plan.Recheck = sooner(plan.Recheck, rp.Recheck)
		}
		return plan
	}
	plan := planAll()
	for _, v := range plan.Bad {
		if st.replacements[v.Name] {
			inProgress[s.regionOf(s.records[v.Name])]--
			failed(v.Name, v.Reason)
		}
	}
	// A failure just found starts a backoff that holds this reconcile's replacements too.
	if now.Before(st.backoffUntil) && len(plan.Replace) > 0 {
		plan = planAll()
	}
	for _, v := range plan.Replace {
		in := s.records[v.Name]
		s.event("Instance/"+v.Name, v1alpha1.EventWarning, v.Reason, "%s", v.Message)
		s.terminate(in, v.Message)
		st.justHealed++
	}
	if plan.Deferred > 0 {
		s.c.log.Debug("healing deferred", "fleet", s.fleetName(), "instances", plan.Deferred, "in_progress", len(st.replacements), "backoff_until", st.backoffUntil)
	}
	s.healRecheck = plan.Recheck
}

// regionHealPolicy is the healing policy of one region of the fleet: its bound follows the
// region's desired count.
func (s *scope) regionHealPolicy(region string) healPolicy {
	p := policyOf(s.fleet)
	if s.fleet.Spec.Regions != nil {
		p.MaxInProgress = max(1, int(*s.fleet.RegionReplicas(region).Desired)/4)
	}
	return p
}

// lbHealth is the load balancer's view of the fleet's instances: nil without a health source, and
// for a fleet without listeners, whose instances the load balancer has no target for and never
// judges.
func (s *scope) lbHealth() HealthSource {
	if len(s.fleet.Spec.Listeners) == 0 {
		return nil
	}
	return s.c.opts.Health
}

// proven reports whether an instance serves: healthy in the load balancer that sends it
// traffic, or, when no load balancer judges the fleet, ready.
func (s *scope) proven(in *v1alpha1.Instance) bool {
	if state, _, judged := s.servingHealth(in); judged {
		return state == HealthHealthy
	}
	return in.Status.Phase == v1alpha1.PhaseReady
}

// serves reports whether an instance counts as serving in the fleet's status: Ready (the agent's
// verdict on its workload) and proven (the load balancer's verdict).
func (s *scope) serves(in *v1alpha1.Instance) bool { return ready(in) && s.proven(in) }

// servingHealth is the instance's state in the load balancer that sends it traffic (Serving,
// else Health) and whether that load balancer's changes are notified; judged is false for a
// fleet without listeners, or without a load balancer to read.
func (s *scope) servingHealth(in *v1alpha1.Instance) (state string, notified, judged bool) {
	if len(s.fleet.Spec.Listeners) == 0 {
		return "", false, false
	}
	if src := s.c.opts.Serving; src != nil {
		state, notified = src.ServingHealth(s.fleet, in)
		return state, notified, true
	}
	if h := s.c.opts.Health; h != nil {
		state, _ = h.InstanceHealth(in.Metadata.Name)
		return state, s.c.healthNotified, true
	}
	return "", false, false
}

// awaitsServing reports whether a Ready instance of the fleet does not serve yet in a load
// balancer whose changes are not notified: nothing would bring the fleet back when it does.
func (s *scope) awaitsServing() bool {
	for _, in := range s.records {
		if !active(in) || IsWarm(in) || !ready(in) {
			continue
		}
		if state, notified, judged := s.servingHealth(in); judged && !notified && state != HealthHealthy {
			return true
		}
	}
	return false
}

// noteReplacements runs after scale(): the instances it just created stand in for this
// reconcile's healed ones, and are watched until they prove healthy.
func (s *scope) noteReplacements() {
	st := s.healState()
	if st.justHealed == 0 {
		return
	}
	var fresh []string
	for name, in := range s.records {
		if in.Status.Phase == v1alpha1.PhasePending && in.Metadata.ResourceVersion == 0 {
			fresh = append(fresh, name)
		}
	}
	sort.Strings(fresh)
	for _, name := range fresh[:min(st.justHealed, len(fresh))] {
		st.replacements[name] = true
	}
	st.justHealed = 0
}

// healRequeue says how soon a fleet should be looked at again for healing: when an instance may
// become due or a backoff ends. A health source that cannot notify (HealthNotifier) is polled
// every HealthPollInterval instead while the load balancer judges the fleet's instances.
func (s *scope) healRequeue() time.Duration {
	if len(s.records) == 0 {
		return 0
	}
	if s.lbHealth() != nil && !s.c.healthNotified {
		return sooner(s.healRecheck, s.c.opts.HealthPollInterval)
	}
	return s.healRecheck
}

// healthChanged enqueues the fleet of an instance whose health changed: at once for a new state,
// within HealthPollInterval for failed requests, so that a fleet answering errors is judged for
// outliers about once per interval however many requests fail.
func (c *Controller) healthChanged(ch HealthChange) {
	if ch.Fleet == "" {
		return
	}
	if ch.Errors {
		c.queue.AddAfter(ch.Fleet, c.opts.HealthPollInterval)
		return
	}
	c.queue.Add(ch.Fleet)
}
