package controller

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
)

// conditionIs says what keeps fleet's condition typ from having status and reason ("" for any).
func (e *env) conditionIs(fleet, typ string, status metav1.ConditionStatus, reason string) func() string {
	return func() string {
		f := e.fleet(fleet)
		c := meta.FindStatusCondition(f.Status.Conditions, typ)
		switch {
		case c == nil:
			return fmt.Sprintf("no %s condition in %+v", typ, f.Status.Conditions)
		case c.Status != status || (reason != "" && c.Reason != reason):
			return fmt.Sprintf("%s is %s/%s (%s), want %s/%s", typ, c.Status, c.Reason, c.Message, status, reason)
		case c.ObservedGeneration != f.Metadata.Generation:
			return fmt.Sprintf("%s written for generation %d, fleet is at %d", typ, c.ObservedGeneration, f.Metadata.Generation)
		}
		return ""
	}
}

// The reconciler writes the conditions with the status: Ready once every instance serves, and
// LoadBalancerReady=False with the load balancer's reason when it refuses the fleet's listener,
// which also takes Ready away and sets Degraded, until the load balancer serves it again.
func TestStatusCarriesConditions(t *testing.T) {
	sink := &weightSink{}
	e := startEnv(t, &env{targets: sink})
	f := fleetSpec("web", "img", 2)
	f.Spec.Listeners = []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: "http"}}
	e.put(f)
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionTrue, "AllReplicasReady"))
	for _, typ := range []string{v1alpha1.ConditionAvailable, v1alpha1.ConditionLoadBalancerReady} {
		if msg := e.conditionIs("web", typ, metav1.ConditionTrue, "")(); msg != "" {
			t.Error(msg)
		}
	}
	for _, typ := range []string{v1alpha1.ConditionProgressing, v1alpha1.ConditionDegraded} {
		if msg := e.conditionIs("web", typ, metav1.ConditionFalse, "")(); msg != "" {
			t.Error(msg)
		}
	}

	// The listener moves to a port the host has taken: the load balancer refuses it when the
	// reconcile of the change hands it over.
	sink.mu.Lock()
	sink.refused = errors.New("listen tcp 127.0.0.1:8081: bind: address already in use")
	sink.mu.Unlock()
	f.Spec.Listeners[0].Port = 8081
	e.put(f)
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionLoadBalancerReady, metav1.ConditionFalse, "ListenerRefused"))
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionFalse, "LoadBalancerNotReady"))
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionDegraded, metav1.ConditionTrue, "ListenerRefused"))

	sink.mu.Lock()
	sink.refused = nil
	sink.mu.Unlock()
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionTrue, "AllReplicasReady"))
}

// readyCounts says what keeps fleet from reporting ready of its instances (status.readyReplicas,
// and the current revision's and every region's) and the phase phase.
func (e *env) readyCounts(fleet string, ready int32, phase string) func() string {
	return func() string {
		f := e.fleet(fleet)
		st := f.Status
		got := fmt.Sprintf("%s %d", st.Phase, st.ReadyReplicas)
		for _, r := range st.Revisions {
			got += fmt.Sprintf(" %s:%d", r.Name, r.ReadyReplicas)
		}
		for _, r := range st.Regions {
			got += fmt.Sprintf(" region %s:%d", r.Name, r.ReadyReplicas)
		}
		want := fmt.Sprintf("%s %d %s:%d region %s:%d", phase, ready, st.CurrentRevision, ready, v1alpha1.DefaultRegionName, ready)
		if got != want {
			return fmt.Sprintf("fleet %s reports %q, want %q", fleet, got, want)
		}
		return ""
	}
}

// phasesReady says what keeps fleet from having n instances that their agent reports Ready.
func (e *env) phasesReady(fleet string, n int) func() string {
	return func() string {
		ready := 0
		for _, in := range e.records(fleet) {
			if in.Status.Phase == v1alpha1.PhaseReady {
				ready++
			}
		}
		if ready != n {
			return fmt.Sprintf("%d of fleet %s's instances Ready, want %d", ready, fleet, n)
		}
		return ""
	}
}

// A Ready instance that the load balancer has not found healthy does not serve anyone: the fleet
// is neither Available nor Ready, and counts no ready instance in its status, until the load
// balancer agrees. A fleet without listeners has no load balancer to agree: its agents' verdict
// is enough.
func TestConditionsWaitForTheLoadBalancer(t *testing.T) {
	h := newFakeHealth()
	h.setDefault("unknown")
	e := startEnv(t, &env{targets: &weightSink{}, health: h})
	f := fleetSpec("web", "img", 2)
	f.Spec.Listeners = []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: "http"}}
	e.put(f)
	e.put(fleetSpec("batch", "img", 2))
	waitFor(t, 5*time.Second, e.phasesReady("web", 2))
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionAvailable, metav1.ConditionFalse, "MinimumReplicasUnavailable"))
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionFalse, "ReplicasNotReady"))
	waitFor(t, 5*time.Second, e.readyCounts("web", 0, "Scaling"))
	waitFor(t, 5*time.Second, e.conditionIs("batch", v1alpha1.ConditionReady, metav1.ConditionTrue, "AllReplicasReady"))
	waitFor(t, 5*time.Second, e.readyCounts("batch", 2, "Ready"))

	h.setDefault(HealthHealthy)
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionTrue, "AllReplicasReady"))
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionAvailable, metav1.ConditionTrue, ""))
	waitFor(t, 5*time.Second, e.readyCounts("web", 2, "Ready"))
}

// fakeServing is the load balancer that sends traffic, as a region's is: read, never notified.
type fakeServing struct {
	mu    sync.Mutex
	state string
}

func (f *fakeServing) ServingHealth(*v1alpha1.Fleet, *v1alpha1.Instance) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.state, false
}

func (f *fakeServing) set(state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = state
}

// An instance serves when the load balancer that sends it traffic (a region's own) finds it
// healthy, not when the one healing reads does; that load balancer tells of no change, so the
// fleet is looked at again until its instances serve.
func TestReadyFollowsTheLoadBalancerThatSendsTraffic(t *testing.T) {
	h := newFakeHealth() // every instance healthy in the load balancer healing reads
	serving := &fakeServing{state: HealthUnhealthy}
	e := startEnv(t, &env{targets: &weightSink{}, health: h, serving: serving})
	f := fleetSpec("web", "img", 2)
	f.Spec.Listeners = []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: "http"}}
	e.put(f)
	waitFor(t, 5*time.Second, e.phasesReady("web", 2))
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionFalse, "ReplicasNotReady"))
	waitFor(t, 5*time.Second, e.readyCounts("web", 0, "Scaling"))

	serving.set(HealthHealthy)
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionTrue, "AllReplicasReady"))
	waitFor(t, 5*time.Second, e.readyCounts("web", 2, "Ready"))
}
