package controller

import (
	"errors"
	"fmt"
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

// A Ready instance that the load balancer has not found healthy does not serve anyone: the fleet
// is neither Available nor Ready until the load balancer agrees.
func TestConditionsWaitForTheLoadBalancer(t *testing.T) {
	h := newFakeHealth()
	h.setDefault("unknown")
	e := startEnv(t, &env{targets: &weightSink{}, health: h})
	f := fleetSpec("web", "img", 2)
	f.Spec.Listeners = []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: "http"}}
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		if n := len(e.records("web")); n != 2 || e.fleet("web").Status.ReadyReplicas != 2 {
			return fmt.Sprintf("%d records, %d ready, want 2 Ready instances", n, e.fleet("web").Status.ReadyReplicas)
		}
		return ""
	})
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionAvailable, metav1.ConditionFalse, "MinimumReplicasUnavailable"))
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionFalse, "ReplicasNotReady"))
	h.setDefault(HealthHealthy)
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionReady, metav1.ConditionTrue, "AllReplicasReady"))
	waitFor(t, 5*time.Second, e.conditionIs("web", v1alpha1.ConditionAvailable, metav1.ConditionTrue, ""))
}
