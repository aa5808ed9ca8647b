package agent

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func i32(n int32) *int32 { return &n }

// wantVerdict fails t unless v's readiness is ready and its why contains why.
func wantVerdict(t *testing.T, v verdict, ready bool, why string) {
	t.Helper()
	if v.ready != ready || !strings.Contains(v.why, why) {
		t.Errorf("verdict = %+v, want ready=%v why containing %q", v, ready, why)
	}
}

func TestDeploymentVerdict(t *testing.T) {
	dep := func(gen, observed int64, replicas *int32, st appsv1.DeploymentStatus) *appsv1.Deployment {
		st.ObservedGeneration = observed
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: "hello", Generation: gen},
			Spec:       appsv1.DeploymentSpec{Replicas: replicas},
			Status:     st,
		}
	}
	unavailable := []appsv1.DeploymentCondition{
		{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionFalse, Reason: "MinimumReplicasUnavailable", Message: "Deployment does not have minimum availability."},
		{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "ReplicaSetUpdated"},
	}
	tests := []struct {
		name     string
		d        *appsv1.Deployment
		ready    bool
		terminal bool
		why      []string
	}{
		{"available", dep(1, 1, i32(2), appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}), true, false, nil},
		{"replicas default to 1", dep(1, 1, nil, appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}), true, false, nil},
		{"zero replicas is available", dep(1, 1, i32(0), appsv1.DeploymentStatus{}), true, false, nil},
		{"not observed yet", dep(2, 1, i32(1), appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}), false, false, []string{"not seen it yet"}},
		{"nothing available", dep(1, 1, i32(1), appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, Conditions: unavailable}), false, false,
			[]string{"0 of 1 replicas available", "Available=False MinimumReplicasUnavailable: Deployment does not have minimum availability."}},
		{"not updated", dep(1, 1, i32(3), appsv1.DeploymentStatus{Replicas: 3, UpdatedReplicas: 1, AvailableReplicas: 3}), false, false, []string{"1 of 3 replicas updated"}},
		{"old replicas left", dep(1, 1, i32(1), appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 1}), false, false, []string{"1 old replicas pending termination"}},
		{"replica failure shown", dep(1, 1, i32(1), appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentReplicaFailure, Status: corev1.ConditionTrue, Reason: "FailedCreate", Message: `pods "hello-x" is forbidden`},
		}}), false, false, []string{"0 of 1 replicas updated", `ReplicaFailure=True FailedCreate: pods "hello-x" is forbidden`}},
		{"progress deadline exceeded", dep(1, 1, i32(1), appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "hello-1" has timed out progressing.`},
		}}), false, true, []string{"progress deadline exceeded", "timed out progressing"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := deploymentVerdict(tt.d)
			if v.ready != tt.ready || v.terminal != tt.terminal {
				t.Fatalf("verdict = %+v, want ready=%v terminal=%v", v, tt.ready, tt.terminal)
			}
			for _, w := range tt.why {
				if !strings.Contains(v.why, w) {
					t.Errorf("why %q does not contain %q", v.why, w)
				}
			}
			if tt.ready && v.why != "" {
				t.Errorf("ready with why %q", v.why)
			}
		})
	}
}

func TestStatefulSetVerdict(t *testing.T) {
	ss := func(gen int64, replicas *int32, strategy appsv1.StatefulSetUpdateStrategyType, st appsv1.StatefulSetStatus) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "db", Generation: gen},
			Spec:       appsv1.StatefulSetSpec{Replicas: replicas, UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: strategy}},
			Status:     st,
		}
	}
	ok := appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 2, ReadyReplicas: 2, AvailableReplicas: 2, UpdatedReplicas: 2, CurrentRevision: "r1", UpdateRevision: "r1"}
	tests := []struct {
		name  string
		s     *appsv1.StatefulSet
		ready bool
		why   string
	}{
		{"ready", ss(1, i32(2), appsv1.RollingUpdateStatefulSetStrategyType, ok), true, ""},
		{"not observed", ss(2, i32(2), appsv1.RollingUpdateStatefulSetStrategyType, ok), false, "not seen it yet"},
		{"not ready", ss(1, i32(3), appsv1.RollingUpdateStatefulSetStrategyType, ok), false, "2 of 3 replicas ready"},
		{"ready not available", ss(1, i32(2), appsv1.RollingUpdateStatefulSetStrategyType, func() appsv1.StatefulSetStatus { s := ok; s.AvailableReplicas = 1; return s }()), false, "1 of 2 replicas available"},
		{"rolling update in progress", ss(1, i32(2), appsv1.RollingUpdateStatefulSetStrategyType, func() appsv1.StatefulSetStatus { s := ok; s.UpdateRevision = "r2"; s.UpdatedReplicas = 1; return s }()), false, "1 of 2 replicas at the update revision"},
		{"on delete ignores revisions", ss(1, i32(2), appsv1.OnDeleteStatefulSetStrategyType, func() appsv1.StatefulSetStatus { s := ok; s.UpdateRevision = "r2"; return s }()), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantVerdict(t, statefulSetVerdict(tt.s), tt.ready, tt.why) })
	}
}

func TestDaemonSetVerdict(t *testing.T) {
	ds := func(gen int64, st appsv1.DaemonSetStatus) *appsv1.DaemonSet {
		return &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: "agent", Generation: gen}, Status: st}
	}
	tests := []struct {
		name  string
		d     *appsv1.DaemonSet
		ready bool
		why   string
	}{
		{"ready", ds(1, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, UpdatedNumberScheduled: 1, NumberAvailable: 1}), true, ""},
		{"nothing to schedule", ds(1, appsv1.DaemonSetStatus{ObservedGeneration: 1}), true, ""},
		{"not observed (status all zero)", ds(1, appsv1.DaemonSetStatus{}), false, "not seen it yet"},
		{"not updated", ds(1, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, NumberAvailable: 1}), false, "0 of 1 pods updated"},
		{"not available", ds(1, appsv1.DaemonSetStatus{ObservedGeneration: 1, DesiredNumberScheduled: 1, UpdatedNumberScheduled: 1}), false, "0 of 1 pods available"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantVerdict(t, daemonSetVerdict(tt.d), tt.ready, tt.why) })
	}
}

func TestNodeVerdict(t *testing.T) {
	node := func(conds ...corev1.NodeCondition) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Status: corev1.NodeStatus{Conditions: conds}}
	}
	tests := []struct {
		name  string
		n     *corev1.Node
		ready bool
		why   string
	}{
		{"ready", node(corev1.NodeCondition{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse}, corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue}), true, ""},
		{"not ready", node(corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady", Message: "container runtime network not ready"}), false, "node web-1 is not Ready (KubeletNotReady: container runtime network not ready)"},
		{"no condition yet", node(), false, "has not reported Ready yet"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { wantVerdict(t, nodeVerdict(tt.n), tt.ready, tt.why) })
	}
}

func TestPodsReport(t *testing.T) {
	waiting := func(name, reason, msg string) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: name, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
	}
	pod := func(name string, phase corev1.PodPhase, cs ...corev1.ContainerStatus) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{Phase: phase, ContainerStatuses: cs}}
	}
	crash := waiting("app", "CrashLoopBackOff", "back-off 10s restarting failed container")
	crash.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 2, Reason: "Error"}
	deleting := pod("old", corev1.PodRunning, corev1.ContainerStatus{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	tests := []struct {
		name     string
		pods     []corev1.Pod
		terminal bool
		want     []string
	}{
		{"no pods", nil, false, []string{"no pods"}},
		{"image never pulled is terminal", []corev1.Pod{pod("web-1", corev1.PodPending, waiting("web", "ErrImageNeverPull", `Container image "missing:v1" is not present with pull policy of Never`))}, true,
			[]string{"pod web-1", "container web waiting: ErrImageNeverPull", `"missing:v1" is not present`}},
		{"invalid image name is terminal", []corev1.Pod{pod("web-1", corev1.PodPending, waiting("web", "InvalidImageName", "bad"))}, true, []string{"InvalidImageName"}},
		{"crash loop is not terminal", []corev1.Pod{pod("web-1", corev1.PodRunning, crash)}, false, []string{"CrashLoopBackOff", "last exit code 2: Error"}},
		{"creating is not terminal", []corev1.Pod{pod("web-1", corev1.PodPending, waiting("web", "ContainerCreating", ""))}, false, []string{"container web waiting: ContainerCreating"}},
		{"unschedulable", []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "big"}, Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/1 nodes are available: 1 Insufficient memory."}}}}}, false,
			[]string{"pod big: not scheduled: Unschedulable: 0/1 nodes are available: 1 Insufficient memory."}},
		{"running not ready", []corev1.Pod{pod("web-1", corev1.PodRunning, corev1.ContainerStatus{Name: "web", RestartCount: 1, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})}, false,
			[]string{"container web running, not ready (restarts 1)"}},
		{"terminating", []corev1.Pod{deleting}, false, []string{"pod old: terminating"}},
		{"sorted by name", []corev1.Pod{pod("b", corev1.PodPending), pod("a", corev1.PodPending)}, false, []string{"pod a: phase Pending; pod b: phase Pending"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, terminal := podsReport(tt.pods, nil)
			if terminal != tt.terminal {
				t.Errorf("terminal = %v, want %v (%s)", terminal, tt.terminal, got)
			}
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("report %q does not contain %q", got, w)
				}
			}
		})
	}
}

// TestPodsReportLogLines: a container that exited with an error is explained by the last lines of
// its log (its previous run's when it waits to restart); a clean exit and a running container
// are not.
func TestPodsReportLogLines(t *testing.T) {
	crash := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
	crash.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}
	exited := corev1.ContainerStatus{Name: "init", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3, Reason: "Error"}}}
	clean := corev1.ContainerStatus{Name: "done", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}}
	pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "shop"}, Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{crash, exited, clean}}}
	var asked []string
	got, _ := podsReport([]corev1.Pod{pod}, func(p *corev1.Pod, container string, previous bool) string {
		asked = append(asked, fmt.Sprintf("%s/%s/%s previous=%t", p.Namespace, p.Name, container, previous))
		return `"fatal: DELAY: invalid duration"`
	})
	for _, w := range []string{
		`container app waiting: CrashLoopBackOff (last exit code 1: Error); last log lines: "fatal: DELAY: invalid duration"`,
		`container init terminated: exit code 3 Error; last log lines: "fatal`,
	} {
		if !strings.Contains(got, w) {
			t.Errorf("report %q does not contain %q", got, w)
		}
	}
	want := []string{"shop/web-1/app previous=true", "shop/web-1/init previous=false"}
	if !slices.Equal(asked, want) {
		t.Errorf("logs asked for %v, want %v (a clean exit needs none)", asked, want)
	}
}

// TestPodsSteady: an available workload counts as steady only while each of its pods' containers
// runs and is ready; a container that has just exited (crash-looping) is not.
func TestPodsSteady(t *testing.T) {
	running := corev1.ContainerStatus{Name: "app", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}}
	exited := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1}}}
	backoff := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}}
	pod := func(cs ...corev1.ContainerStatus) corev1.Pod {
		return corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: cs}}
	}
	gone := pod(exited)
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want bool
	}{
		{"no pods", nil, true},
		{"running and ready", []corev1.Pod{pod(running), pod(running)}, true},
		{"one exited", []corev1.Pod{pod(running), pod(exited)}, false},
		{"crash-loop back-off", []corev1.Pod{pod(backoff)}, false},
		{"running, not ready", []corev1.Pod{pod(corev1.ContainerStatus{Name: "app", State: running.State})}, false},
		{"a terminating pod does not count", []corev1.Pod{pod(running), gone}, true},
	} {
		if got := podsSteady(tc.pods); got != tc.want {
			t.Errorf("%s: podsSteady = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestLatestStart: the boot's steady wait counts from the latest start of the running containers,
// and cannot count from it while one of them does not run.
func TestLatestStart(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 22, 0, 0, 0, time.UTC)
	started := func(at time.Time) corev1.ContainerStatus {
		return corev1.ContainerStatus{Name: "app", Ready: true, State: corev1.ContainerState{
			Running: &corev1.ContainerStateRunning{StartedAt: metav1.Time{Time: at}}}}
	}
	waiting := corev1.ContainerStatus{Name: "app", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}
	pod := func(cs ...corev1.ContainerStatus) corev1.Pod {
		return corev1.Pod{Status: corev1.PodStatus{ContainerStatuses: cs}}
	}
	gone := pod(started(t0.Add(time.Hour)))
	gone.DeletionTimestamp = &metav1.Time{Time: t0}
	for _, tc := range []struct {
		name   string
		pods   []corev1.Pod
		want   time.Time
		wantOK bool
	}{
		{"no pods", nil, time.Time{}, true},
		{"the latest of every container", []corev1.Pod{pod(started(t0), started(t0.Add(2*time.Second))), pod(started(t0.Add(time.Second)))}, t0.Add(2 * time.Second), true},
		{"one not running yet", []corev1.Pod{pod(started(t0)), pod(waiting)}, time.Time{}, false},
		{"a terminating pod does not count", []corev1.Pod{pod(started(t0)), gone}, t0, true},
	} {
		got, ok := latestStart(tc.pods)
		if !got.Equal(tc.want) || ok != tc.wantOK {
			t.Errorf("%s: latestStart = %v, %v, want %v, %v", tc.name, got, ok, tc.want, tc.wantOK)
		}
	}
}
