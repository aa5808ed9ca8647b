package controller

import (
	"fmt"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/autoscaler"
)

var _ autoscaler.InstanceView = (*Controller)(nil)

// The view counts serving and booting instances and lists the serving ones with their addresses,
// leaving the warm pool out of both.
func TestInstanceView(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := fleetSpec("web", "img", 2)
	f.Spec.Autoscaling = &v1alpha1.Autoscaling{Metric: v1alpha1.MetricRequestsPerSecond, Target: 10, WarmPool: 1}
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		ready, booting := e.ctrl.InstanceCounts("web")
		all := e.ctrl.ServingInstances()
		if ready != 2 || booting != 0 || len(all) != 2 || len(e.observed("web")) != 3 {
			return fmt.Sprintf("ready %d, booting %d, serving %+v, %d instances; want 2, 0, two, 3 with the warm one", ready, booting, all, len(e.observed("web")))
		}
		for _, in := range all {
			if in.Fleet != "web" || in.Revision == "" || in.Region == "" || in.Address == "" || isWarmName(e, in.Name) {
				return fmt.Sprintf("ServingInstances has %+v, want web's serving ones with region, revision and address", in)
			}
		}
		return ""
	})
}

func isWarmName(e *env, name string) bool {
	for _, in := range e.records("web") {
		if in.Metadata.Name == name {
			return IsWarm(in)
		}
	}
	return false
}
