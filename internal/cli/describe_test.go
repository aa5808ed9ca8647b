package cli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
)

// describe shows each condition with its status, reason, age and message.
func TestDescribeFleetConditions(t *testing.T) {
	since := metav1.NewTime(time.Now().Add(-3 * time.Minute))
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Status: v1alpha1.FleetStatus{Conditions: []metav1.Condition{
		{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "AllReplicasReady", Message: "3/3 instances of web-b ready", LastTransitionTime: since},
		{Type: v1alpha1.ConditionLoadBalancerReady, Status: metav1.ConditionFalse, Reason: "ListenerRefused", Message: "bind: permission denied", LastTransitionTime: since},
	}}}
	var b strings.Builder
	describeFleet(&b, f)
	out := b.String()
	_, conds, ok := strings.Cut(out, "Conditions:\n")
	if !ok {
		t.Fatalf("no Conditions section:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(conds), "\n")
	if len(lines) != 3 {
		t.Fatalf("conditions table %q, want a header and 2 rows", conds)
	}
	for i, want := range [][]string{
		{"TYPE", "STATUS", "REASON", "AGE", "MESSAGE"},
		{"Ready", "True", "AllReplicasReady", "3m", "3/3 instances of web-b ready"},
		{"LoadBalancerReady", "False", "ListenerRefused", "3m", "bind: permission denied"},
	} {
		if got := strings.Fields(lines[i]); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("line %d %q, want %q", i, lines[i], strings.Join(want, " "))
		}
	}
}
