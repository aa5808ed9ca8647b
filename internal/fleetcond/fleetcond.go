// Package fleetcond computes a fleet's conditions (Ready, Available, Progressing,
// LoadBalancerReady, Degraded) from what the reconciler observed. It is a pure function with no
// access to the store, the clock or the load balancer, so that every case is a row of a table test;
// the reconciler calls it from its status write. Transition times come from apimachinery's
// meta.SetStatusCondition: a condition's time moves only when its status does.
package fleetcond

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
)

// Reasons the conditions give.
const (
	ReasonAllReplicasReady     = "AllReplicasReady"
	ReasonReplicasNotReady     = "ReplicasNotReady"
	ReasonScaledToZero         = "ScaledToZero"
	ReasonMinimumAvailable     = "MinimumReplicasAvailable"
	ReasonMinimumUnavailable   = "MinimumReplicasUnavailable"
	ReasonScaling              = "Scaling"
	ReasonRolloutInProgress    = "RolloutInProgress"
	ReasonRolloutPaused        = "RolloutPaused"
	ReasonRolloutFailed        = "RolloutFailed"
	ReasonRolloutRolledBack    = "RolloutRolledBack"
	ReasonHealing              = "Healing"
	ReasonHealingBackoff       = "HealingBackoff"
	ReasonComplete             = "Complete"
	ReasonNoListeners          = "NoListeners"
	ReasonListenersServed      = "ListenersServed"
	ReasonListenerRefused      = "ListenerRefused"
	ReasonReconcileError       = "ReconcileError"
	ReasonAsExpected           = "AsExpected"
	ReasonLoadBalancerNotReady = "LoadBalancerNotReady"
	ReasonRolloutNotDone       = "RolloutNotDone"
	ReasonInstanceFailed       = "InstanceFailed"
)

// Observed is what the reconciler saw of one fleet on one reconcile.
type Observed struct {
	// Generation is the spec generation the reconcile worked from.
	Generation int64
	// Desired is spec.replicas.desired; MaxUnavailable is spec.rollout.maxUnavailable.
	Desired, MaxUnavailable int32
	// Replicas counts the fleet's instances that are not terminating (the warm pool aside).
	Replicas int32
	// Updated counts those of the current revision; UpdatedReady those of them that serve (Ready,
	// and healthy in the load balancer when it judges the fleet).
	Updated, UpdatedReady int32
	// Available counts instances of any revision that serve: Ready and, when the load balancer
	// judges the fleet, healthy in it.
	Available int32
	// Revision is the current revision; Rollout the state of the latest BlueGreen or Canary
	// rollout (nil when there is none).
	Revision string
	Rollout  *v1alpha1.RolloutStatus
	// Listeners is how many listeners the spec has; ListenerError why the load balancer refused
	// them (nil when it serves them).
	Listeners     int
	ListenerError error
	// Healing is self-healing's state (nil when nothing is being replaced).
	Healing *v1alpha1.HealingStatus
	// ReconcileError is what went wrong on this reconcile, if anything.
	ReconcileError error
}

// Update returns conds with each of the five conditions set from o, as of now: conditions whose
// status did not change keep their transition time. conds is not modified.
func Update(conds []metav1.Condition, o Observed, now time.Time) []metav1.Condition {
	out := slices.Clone(conds)
	at := metav1.NewTime(now)
	for _, c := range compute(o, now) {
		c.ObservedGeneration, c.LastTransitionTime = o.Generation, at
		meta.SetStatusCondition(&out, c)
	}
	return out
}

func cond(typ string, ok bool, reason, format string, args ...any) metav1.Condition {
	st := metav1.ConditionFalse
	if ok {
		st = metav1.ConditionTrue
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: fmt.Sprintf(format, args...)}
}

func compute(o Observed, now time.Time) []metav1.Condition {
	lb := loadBalancer(o)
	progressing := progress(o, now)
	degraded := degradation(o, now, lb)
	return []metav1.Condition{
		ready(o, lb, progressing),
		available(o),
		progressing,
		lb,
		degraded,
	}
}

func loadBalancer(o Observed) metav1.Condition {
	switch {
	case o.Listeners == 0:
		return cond(v1alpha1.ConditionLoadBalancerReady, true, ReasonNoListeners, "the fleet has no listeners")
	case o.ListenerError != nil:
		return cond(v1alpha1.ConditionLoadBalancerReady, false, ReasonListenerRefused, "the load balancer refused the fleet's listeners: %v", o.ListenerError)
	}
	return cond(v1alpha1.ConditionLoadBalancerReady, true, ReasonListenersServed, "the load balancer serves %d listeners", o.Listeners)
}

// rolloutOfRevision is the rollout of the current revision, if there is one.
func rolloutOfRevision(o Observed) *v1alpha1.RolloutStatus {
	if o.Rollout != nil && o.Rollout.Revision == o.Revision {
		return o.Rollout
	}
	return nil
}

// rolloutEnded returns the reason and message of a rollout of the current revision that ended
// without succeeding, and "" otherwise.
func rolloutEnded(o Observed) (reason, msg string) {
	switch ro := rolloutOfRevision(o); {
	case ro == nil:
	case ro.Phase == v1alpha1.RolloutFailed:
		return ReasonRolloutFailed, fmt.Sprintf("rollout of %s failed: %s", ro.Revision, ro.Message)
	case ro.Phase == v1alpha1.RolloutRolledBack:
		return ReasonRolloutRolledBack, fmt.Sprintf("rollout of %s rolled back to %s: %s", ro.Revision, ro.PreviousRevision, ro.Message)
	}
	return "", ""
}

func backingOff(h *v1alpha1.HealingStatus, now time.Time) bool {
	return h != nil && h.BackoffUntil != nil && now.Before(*h.BackoffUntil)
}

func progress(o Observed, now time.Time) metav1.Condition {
	const t = v1alpha1.ConditionProgressing
	ro := rolloutOfRevision(o)
	ended, endMsg := rolloutEnded(o)
	switch {
	case ended != "":
		return cond(t, false, ended, "%s", endMsg)
	case ro != nil && ro.Phase == v1alpha1.RolloutPaused:
		return cond(t, true, ReasonRolloutPaused, "%s rollout to %s paused: %s", ro.Strategy, ro.Revision, ro.Message)
	case ro.InProgress():
		return cond(t, true, ReasonRolloutInProgress, "%s rollout to %s: %s", ro.Strategy, ro.Revision, ro.Message)
	case backingOff(o.Healing, now):
		return cond(t, false, ReasonHealingBackoff, "%d replacements in a row failed; replacing again after %s", o.Healing.Failures, o.Healing.BackoffUntil.UTC().Format(time.RFC3339))
	case o.Healing != nil && len(o.Healing.Replacements) > 0:
		return cond(t, true, ReasonHealing, "%d replacements of failed instances under way", len(o.Healing.Replacements))
	case o.Updated != o.Desired || o.Replicas != o.Desired || o.UpdatedReady < o.Desired:
		return cond(t, true, ReasonScaling, "%d/%d instances of %s ready, %d instances in all", o.UpdatedReady, o.Desired, o.Revision, o.Replicas)
	}
	return cond(t, false, ReasonComplete, "%d instances of %s ready", o.UpdatedReady, o.Revision)
}

func available(o Observed) metav1.Condition {
	const t = v1alpha1.ConditionAvailable
	need := max(o.Desired-o.MaxUnavailable, 0)
	switch {
	case o.Desired == 0:
		return cond(t, true, ReasonScaledToZero, "the fleet is scaled to zero")
	case o.Available >= need && need > 0:
		return cond(t, true, ReasonMinimumAvailable, "%d instances serve, at least %d needed", o.Available, need)
	case o.Available > 0 && need == 0:
		return cond(t, true, ReasonMinimumAvailable, "%d instances serve", o.Available)
	}
	return cond(t, false, ReasonMinimumUnavailable, "%d instances serve, %d needed", o.Available, max(need, 1))
}

func ready(o Observed, lb, progressing metav1.Condition) metav1.Condition {
	const t = v1alpha1.ConditionReady
	switch {
	case o.ReconcileError != nil:
		return cond(t, false, ReasonReconcileError, "%v", o.ReconcileError)
	case lb.Status != metav1.ConditionTrue:
		return cond(t, false, ReasonLoadBalancerNotReady, "%s", lb.Message)
	case slices.Contains([]string{ReasonRolloutFailed, ReasonRolloutRolledBack, ReasonRolloutInProgress, ReasonRolloutPaused}, progressing.Reason):
		return cond(t, false, ReasonRolloutNotDone, "%s", progressing.Message)
	case o.UpdatedReady < o.Desired || o.Replicas != o.Desired:
		return cond(t, false, ReasonReplicasNotReady, "%d/%d instances of %s ready, %d instances in all%s", o.UpdatedReady, o.Desired, o.Revision, o.Replicas, lastFailure(o))
	}
	return cond(t, true, ReasonAllReplicasReady, "%d/%d instances of %s ready", o.UpdatedReady, o.Desired, o.Revision)
}

func degradation(o Observed, now time.Time, lb metav1.Condition) metav1.Condition {
	const t = v1alpha1.ConditionDegraded
	ended, endMsg := rolloutEnded(o)
	switch {
	case o.ReconcileError != nil:
		return cond(t, true, ReasonReconcileError, "%v", o.ReconcileError)
	case lb.Status != metav1.ConditionTrue:
		return cond(t, true, lb.Reason, "%s", lb.Message)
	case ended != "":
		return cond(t, true, ended, "%s", endMsg)
	case backingOff(o.Healing, now):
		return cond(t, true, ReasonHealingBackoff, "%d replacements in a row failed%s", o.Healing.Failures, lastFailure(o))
	case o.Healing != nil && o.Healing.LastFailure != "":
		return cond(t, true, ReasonInstanceFailed, "%s", o.Healing.LastFailure)
	}
	return cond(t, false, ReasonAsExpected, "nothing needs attention")
}

// lastFailure is "; last failure: <why>" when an instance failed and no replacement serves yet.
func lastFailure(o Observed) string {
	if o.Healing == nil || o.Healing.LastFailure == "" {
		return ""
	}
	return "; last failure: " + o.Healing.LastFailure
}
