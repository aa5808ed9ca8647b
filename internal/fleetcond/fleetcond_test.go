package fleetcond

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// steady is a fleet of 3 at its spec, serving one listener.
func steady() Observed {
	return Observed{Generation: 2, Desired: 3, Replicas: 3, Updated: 3, UpdatedReady: 3, Available: 3, Revision: "web-b", Listeners: 1}
}

// want is one condition as "Status/Reason", plus a word its message must hold ("" for any).
type want struct{ status, reason, msg string }

func TestUpdate(t *testing.T) {
	later := t0.Add(time.Hour)
	tests := []struct {
		name   string
		change func(*Observed)
		want   map[string]want
	}{
		{"steady", nil, map[string]want{
			v1alpha1.ConditionReady:             {"True", ReasonAllReplicasReady, "3/3"},
			v1alpha1.ConditionAvailable:         {"True", ReasonMinimumAvailable, "3 instances serve"},
			v1alpha1.ConditionProgressing:       {"False", ReasonComplete, ""},
			v1alpha1.ConditionLoadBalancerReady: {"True", ReasonListenersServed, ""},
			v1alpha1.ConditionDegraded:          {"False", ReasonAsExpected, ""},
		}},
		{"scaling up", func(o *Observed) { o.Desired = 5 }, map[string]want{
			v1alpha1.ConditionReady:       {"False", ReasonReplicasNotReady, "3/5"},
			v1alpha1.ConditionAvailable:   {"False", ReasonMinimumUnavailable, "3 instances serve, 5 needed"},
			v1alpha1.ConditionProgressing: {"True", ReasonScaling, ""},
		}},
		{"nothing serves", func(o *Observed) { o.UpdatedReady, o.Available = 0, 0 }, map[string]want{
			v1alpha1.ConditionReady:     {"False", ReasonReplicasNotReady, "0/3"},
			v1alpha1.ConditionAvailable: {"False", ReasonMinimumUnavailable, "0 instances serve, 3 needed"},
		}},
		{"maxUnavailable allows one down", func(o *Observed) { o.MaxUnavailable, o.Available = 1, 2 }, map[string]want{
			v1alpha1.ConditionAvailable: {"True", ReasonMinimumAvailable, "at least 2"},
		}},
		{"scaled to zero", func(o *Observed) { o.Desired, o.Replicas, o.Updated, o.UpdatedReady, o.Available = 0, 0, 0, 0, 0 }, map[string]want{
			v1alpha1.ConditionReady:     {"True", ReasonAllReplicasReady, "0/0"},
			v1alpha1.ConditionAvailable: {"True", ReasonScaledToZero, ""},
		}},
		{"canary in progress", func(o *Observed) {
			o.Rollout = &v1alpha1.RolloutStatus{Revision: "web-b", PreviousRevision: "web-a", Strategy: v1alpha1.StrategyCanary, Phase: v1alpha1.RolloutProgressing, Message: "step 1/2"}
		}, map[string]want{
			v1alpha1.ConditionReady:       {"False", ReasonRolloutNotDone, "step 1/2"},
			v1alpha1.ConditionProgressing: {"True", ReasonRolloutInProgress, "Canary rollout to web-b"},
			v1alpha1.ConditionDegraded:    {"False", ReasonAsExpected, ""},
		}},
		{"rolled back", func(o *Observed) {
			o.Rollout = &v1alpha1.RolloutStatus{Revision: "web-b", PreviousRevision: "web-a", Phase: v1alpha1.RolloutRolledBack, Message: "aborted by user"}
		}, map[string]want{
			v1alpha1.ConditionReady:       {"False", ReasonRolloutNotDone, "aborted by user"},
			v1alpha1.ConditionProgressing: {"False", ReasonRolloutRolledBack, "rolled back to web-a"},
			v1alpha1.ConditionDegraded:    {"True", ReasonRolloutRolledBack, "aborted by user"},
		}},
		{"rollout of an older revision is over", func(o *Observed) {
			o.Rollout = &v1alpha1.RolloutStatus{Revision: "web-a", Phase: v1alpha1.RolloutFailed}
		}, map[string]want{
			v1alpha1.ConditionReady:    {"True", ReasonAllReplicasReady, ""},
			v1alpha1.ConditionDegraded: {"False", ReasonAsExpected, ""},
		}},
		{"listener refused", func(o *Observed) { o.ListenerError = errors.New("listen tcp 127.0.0.1:80: bind: permission denied") }, map[string]want{
			v1alpha1.ConditionReady:             {"False", ReasonLoadBalancerNotReady, "permission denied"},
			v1alpha1.ConditionLoadBalancerReady: {"False", ReasonListenerRefused, "permission denied"},
			v1alpha1.ConditionDegraded:          {"True", ReasonListenerRefused, "permission denied"},
		}},
		{"no listeners", func(o *Observed) { o.Listeners = 0 }, map[string]want{
			v1alpha1.ConditionLoadBalancerReady: {"True", ReasonNoListeners, ""},
		}},
		{"healing", func(o *Observed) {
			o.Healing = &v1alpha1.HealingStatus{Replacements: []string{"web-b-x"}}
		}, map[string]want{
			v1alpha1.ConditionProgressing: {"True", ReasonHealing, "1 replacements"},
		}},
		{"healing backs off", func(o *Observed) {
			o.Healing = &v1alpha1.HealingStatus{Failures: 3, BackoffUntil: &later}
		}, map[string]want{
			v1alpha1.ConditionProgressing: {"False", ReasonHealingBackoff, "3 replacements in a row failed"},
			v1alpha1.ConditionDegraded:    {"True", ReasonHealingBackoff, ""},
		}},
		{"an instance failed, its replacement booting", func(o *Observed) {
			o.UpdatedReady, o.Available = 2, 2
			o.Healing = &v1alpha1.HealingStatus{Replacements: []string{"web-b-y"}, LastFailure: "instance web-b-x failed: pod app-1: container app waiting: CrashLoopBackOff"}
		}, map[string]want{
			v1alpha1.ConditionReady:    {"False", ReasonReplicasNotReady, "2/3 instances of web-b ready, 3 instances in all; last failure: instance web-b-x failed: pod app-1: container app waiting: CrashLoopBackOff"},
			v1alpha1.ConditionDegraded: {"True", ReasonInstanceFailed, "instance web-b-x failed: pod app-1"},
		}},
		{"replacements keep failing", func(o *Observed) {
			o.Healing = &v1alpha1.HealingStatus{Failures: 2, BackoffUntil: &later, LastFailure: "instance web-b-z failed: ErrImageNeverPull"}
		}, map[string]want{
			v1alpha1.ConditionDegraded: {"True", ReasonHealingBackoff, "2 replacements in a row failed; last failure: instance web-b-z failed: ErrImageNeverPull"},
		}},
		{"backoff over", func(o *Observed) {
			before := t0.Add(-time.Second)
			o.Healing = &v1alpha1.HealingStatus{Failures: 3, BackoffUntil: &before}
		}, map[string]want{
			v1alpha1.ConditionDegraded: {"False", ReasonAsExpected, ""},
		}},
		{"reconcile error", func(o *Observed) { o.ReconcileError = errors.New("provider local: quota") }, map[string]want{
			v1alpha1.ConditionReady:    {"False", ReasonReconcileError, "quota"},
			v1alpha1.ConditionDegraded: {"True", ReasonReconcileError, "quota"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := steady()
			if tt.change != nil {
				tt.change(&o)
			}
			got := Update(nil, o, t0)
			if len(got) != 5 {
				t.Fatalf("%d conditions, want 5: %+v", len(got), got)
			}
			for typ, w := range tt.want {
				c := meta.FindStatusCondition(got, typ)
				if c == nil {
					t.Fatalf("no %s condition", typ)
				}
				if string(c.Status) != w.status || c.Reason != w.reason || !strings.Contains(c.Message, w.msg) {
					t.Errorf("%s = %s/%s %q, want %s/%s with %q", typ, c.Status, c.Reason, c.Message, w.status, w.reason, w.msg)
				}
				if c.ObservedGeneration != 2 || !c.LastTransitionTime.Time.Equal(t0) {
					t.Errorf("%s: generation %d time %v, want 2 and %v", typ, c.ObservedGeneration, c.LastTransitionTime, t0)
				}
			}
		})
	}
}

// A condition's transition time moves only when its status changes, not on a new reason or
// message; the input is not modified.
func TestUpdateTransitionTimes(t *testing.T) {
	o := steady()
	o.MaxUnavailable = 1
	first := Update(nil, o, t0)
	o.Desired = 4 // Ready goes False; Available stays True with another message
	t1 := t0.Add(time.Minute)
	second := Update(first, o, t1)
	times := func(conds []metav1.Condition) string {
		var b strings.Builder
		for _, typ := range []string{v1alpha1.ConditionReady, v1alpha1.ConditionAvailable} {
			c := meta.FindStatusCondition(conds, typ)
			fmt.Fprintf(&b, "%s=%s@%s ", typ, c.Status, c.LastTransitionTime.UTC().Format("15:04"))
		}
		return b.String()
	}
	if got, want := times(first), "Ready=True@03:04 Available=True@03:04 "; got != want {
		t.Fatalf("first update changed: %s, want %s", got, want)
	}
	if got, want := times(second), "Ready=False@03:05 Available=True@03:04 "; got != want {
		t.Fatalf("second update %s, want %s", got, want)
	}
}
