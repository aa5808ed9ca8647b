package controller

import (
	"fmt"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/autoscaler"
)

var _ autoscaler.InstanceView = (*Controller)(nil)

// The view counts serving and booting instances and gives the serving ones' addresses, leaving the
// warm pool out of both.
func TestInstanceView(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := fleetSpec("web", "img", 2)
	f.Spec.Autoscaling = &v1alpha1.Autoscaling{Metric: v1alpha1.MetricRequestsPerSecond, Target: 10, WarmPool: 1}
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		ready, booting := e.ctrl.InstanceCounts("web")
		addrs := e.ctrl.ServingAddresses("web")
		if ready != 2 || booting != 0 || len(addrs) != 2 || len(e.observed("web")) != 3 {
			return fmt.Sprintf("ready %d, booting %d, addresses %v, %d instances; want 2, 0, two, 3 with the warm one", ready, booting, addrs, len(e.observed("web")))
		}
		for name, addr := range addrs {
			if addr == "" || isWarmName(e, name) {
				return fmt.Sprintf("address %q of %s", addr, name)
			}
		}
		// Every fleet's serving instances, as the agents' scraper sees them: the same two.
		all := e.ctrl.ServingInstances()
		if len(all) != 2 {
			return fmt.Sprintf("ServingInstances = %+v, want web's two serving instances", all)
		}
		for _, in := range all {
			if in.Fleet != "web" || in.Revision == "" || in.Region == "" || addrs[in.Name] != in.Address {
				return fmt.Sprintf("ServingInstances has %+v, want web's with its region, revision and address %q", in, addrs[in.Name])
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
