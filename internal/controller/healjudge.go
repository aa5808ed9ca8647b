package controller

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// HealthSource reports what the load balancer sees of each instance, for self-healing. The
// controller declares it; internal/lbsync implements it on top of the load balancer.
type HealthSource interface {
	// InstanceHealth returns the instance's worst state over its listeners (HealthHealthy,
	// HealthUnhealthy, HealthEjected, "unknown", "draining") and since when it has been in that
	// state; state is "" when the load balancer has no target for the instance.
	InstanceHealth(name string) (state string, since time.Time)
	// InstanceStats returns how many requests the instance finished over the last minute and how
	// many of them failed with a 5xx answer.
	InstanceStats(name string) (requests, errors5xx uint64)
}

// ServingSource reports what the load balancer that sends an instance its traffic sees of it,
// where that is not always the load balancer Health reads (a fleet served by its regions' own
// load balancers). The controller declares it; internal/lbsync implements it.
type ServingSource interface {
	// ServingHealth returns the instance's state (as HealthSource.InstanceHealth) in the load
	// balancer that sends it traffic, and whether that load balancer's changes reach the
	// controller (as HealthNotifier's do); when they do not, a fleet with a Ready instance that
	// does not serve yet is looked at again every HealthPollInterval.
	ServingHealth(f *v1alpha1.Fleet, in *v1alpha1.Instance) (state string, notified bool)
}

// HealthNotifier MAY be implemented by a HealthSource that can tell when the load balancer's view
// of an instance changes. The controller then looks at a fleet when one of its instances changes
// state, and while its instances fail requests, instead of polling every fleet with listeners
// every HealthPollInterval: a settled fleet costs nothing.
type HealthNotifier interface {
	// NotifyHealth registers f, called on every change, and reports whether changes will be
	// reported at all. f returns at once and never calls back into the source.
	NotifyHealth(f func(HealthChange)) bool
}

// HealthChange names an instance whose state in the load balancer changed, or, with Errors, one
// that failed requests (reported at most about once a second per instance).
type HealthChange struct {
	Fleet, Instance string
	Errors          bool
}

// Load-balancer states the healing logic acts on.
const (
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
	HealthEjected   = "ejected"
)

// Event reasons of self-healing.
const (
	ReasonInstanceFailed    = "InstanceFailed"
	ReasonInstanceUnhealthy = "InstanceUnhealthy"
	ReasonInstanceOutlier   = "InstanceOutlier"
	ReasonHealingBackoff    = "HealingBackoff"
)

// Outlier detection: an instance is replaced when its 5xx rate over the last minute is at least
// outlierFactor times the median of its fleet, with at least outlierMinRequests requests behind
// the figure, at least outlierMinErrorRate (so that a fleet with no errors at all does not replace
// an instance for one 5xx), and at least outlierMinPeers instances to compare.
const (
	outlierFactor       = 5.0
	outlierMinRequests  = 50
	outlierMinErrorRate = 0.05
	outlierMinPeers     = 3
)

// healPolicy is one fleet's healing thresholds.
type healPolicy struct {
	// Grace is how long after creation an instance's failures are ignored.
	Grace time.Duration
	// UnhealthyFor is how long an instance may stay unhealthy or ejected before it is replaced:
	// unhealthyThreshold x interval.
	UnhealthyFor time.Duration
	// MaxInProgress bounds replacements under way at once.
	MaxInProgress int
}

// policyOf derives the healing policy from a defaulted fleet.
func policyOf(f *v1alpha1.Fleet) healPolicy {
	hc := f.Spec.HealthCheck
	p := healPolicy{MaxInProgress: max(1, int(*f.Spec.Replicas.Desired)/4)}
	if hc.GracePeriod != nil {
		p.Grace = hc.GracePeriod.Duration
	}
	if hc.Interval != nil {
		p.UnhealthyFor = time.Duration(max(hc.UnhealthyThreshold, 1)) * hc.Interval.Duration
	}
	return p
}

// healInput is what the controller knows of one active instance.
type healInput struct {
	Name      string
	CreatedAt time.Time
	// State and Since come from the load balancer (HealthSource.InstanceHealth).
	State string
	Since time.Time
	// Requests and Errors are the last minute's counts (HealthSource.InstanceStats).
	Requests, Errors uint64
	// Failed is the provider's reason when it reports the instance failed, else "".
	Failed string
}

// healVerdict is one instance to replace and why.
type healVerdict struct {
	Name    string
	Reason  string // ReasonInstanceFailed, ReasonInstanceUnhealthy or ReasonInstanceOutlier
	Message string
}

// healPlan is the outcome of planHealing.
type healPlan struct {
	// Bad lists every instance that should be replaced, most urgent first.
	Bad []healVerdict
	// Replace is the part of Bad to replace now, within the bound and outside backoff.
	Replace []healVerdict
	// Deferred counts verdicts held back by the bound or the backoff.
	Deferred int
	// Recheck, when > 0, is when an instance not yet due might become due: look again then.
	Recheck time.Duration
}

// planHealing judges a fleet's instances: failed ones at once, unhealthy ones past their grace
// period and threshold, outliers by their 5xx rate. inProgress counts replacements still under way;
// backoffUntil, when in the future, holds every replacement back. It is a pure function.
func planHealing(now time.Time, p healPolicy, insts []healInput, inProgress int, backoffUntil time.Time) healPlan {
	var plan healPlan
	recheck := func(d time.Duration) { plan.Recheck = sooner(plan.Recheck, d) }
	bad := map[string]bool{}
	for _, in := range insts {
		if in.Failed != "" {
			// Dead is dead: no grace period or threshold to wait for.
			bad[in.Name] = true
			plan.Bad = append(plan.Bad, healVerdict{
				Name: in.Name, Reason: ReasonInstanceFailed,
				Message: fmt.Sprintf("instance %s failed: %s; replacing it", in.Name, in.Failed),
			})
			continue
		}
		if in.State != HealthUnhealthy && in.State != HealthEjected {
			continue
		}
		// The clock starts when the instance went bad or when its grace ended, whichever is later.
		from := in.Since
		if graceEnd := in.CreatedAt.Add(p.Grace); graceEnd.After(from) {
			from = graceEnd
		}
		if wait := from.Add(p.UnhealthyFor).Sub(now); wait >= 0 {
			recheck(wait + time.Millisecond)
			continue
		}
		bad[in.Name] = true
		plan.Bad = append(plan.Bad, healVerdict{
			Name: in.Name, Reason: ReasonInstanceUnhealthy,
			Message: fmt.Sprintf("instance %s has been %s for %s (allowed %s after a %s grace period); replacing it", in.Name, in.State, now.Sub(in.Since).Round(time.Millisecond), p.UnhealthyFor, p.Grace),
		})
	}

	// Outliers: compared with the peers that have enough requests to judge.
	var rates []float64
	for _, in := range insts {
		if in.Requests >= outlierMinRequests {
			rates = append(rates, float64(in.Errors)/float64(in.Requests))
		}
	}
	if len(insts) >= outlierMinPeers && len(rates) >= outlierMinPeers {
		median := medianOf(rates)
		limit := max(outlierFactor*median, outlierMinErrorRate)
		for _, in := range insts {
			if bad[in.Name] || in.Requests < outlierMinRequests || now.Sub(in.CreatedAt) < p.Grace {
				continue
			}
			rate := float64(in.Errors) / float64(in.Requests)
			if rate < limit {
				continue
			}
			plan.Bad = append(plan.Bad, healVerdict{
				Name: in.Name, Reason: ReasonInstanceOutlier,
				Message: fmt.Sprintf("instance %s answered 5xx to %.1f%% of %d requests over the last minute, against a fleet median of %.1f%%; replacing it", in.Name, 100*rate, in.Requests, 100*median),
			})
		}
	}

	// Failed and unhealthy ones first (they serve nothing), then by name for a stable order.
	sort.SliceStable(plan.Bad, func(i, j int) bool {
		if ui, uj := urgency(plan.Bad[i].Reason), urgency(plan.Bad[j].Reason); ui != uj {
			return ui < uj
		}
		return plan.Bad[i].Name < plan.Bad[j].Name
	})
	if now.Before(backoffUntil) {
		plan.Deferred = len(plan.Bad)
		if len(plan.Bad) > 0 {
			recheck(backoffUntil.Sub(now) + time.Millisecond)
		}
		return plan
	}
	room := max(p.MaxInProgress-inProgress, 0)
	n := min(room, len(plan.Bad))
	plan.Replace = plan.Bad[:n]
	plan.Deferred = len(plan.Bad) - n
	return plan
}

// urgency orders verdicts: the lower, the sooner replaced.
func urgency(reason string) int {
	switch reason {
	case ReasonInstanceFailed:
		return 0
	case ReasonInstanceUnhealthy:
		return 1
	}
	return 2
}

func medianOf(v []float64) float64 {
	s := slices.Clone(v)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// healBackoff is the pause after failures consecutive failed replacements: base doubling up to max.
func healBackoff(base, maxDelay time.Duration, failures int) time.Duration {
	if failures <= 0 {
		return 0
	}
	d := base
	for i := 1; i < failures && d < maxDelay; i++ {
		d *= 2
	}
	return min(d, maxDelay)
}
