package controlplane_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestIntegrationScaleToZeroAndBack runs herd up with the fake provider (instances' workloads are
// real HTTP servers on 127.1.0.x) and a fleet autoscaled with min 0 and a 2 s stabilization window.
// With no load the fleet must go to desired 0 and no instances; then one GET through herd's load
// balancer must be held while an instance is created and boots, and answered 200, not refused.
func TestIntegrationScaleToZeroAndBack(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	c, lbPort := loopbackFleet(t, 4, nil, `  replicas: {min: 0, max: 3, desired: 1}
  autoscaling: {metric: requestsPerSecond, target: 50, scaleInStabilization: 2s}
  regions: [{name: local, options: {bootDelay: 1500ms}}]
`)
	c.waitFor(60*time.Second, func() string {
		if d, n := c.desired("web"), len(c.instances()); d != 0 || n != 0 {
			return fmt.Sprintf("desired %d with %d instances while idle, want 0 and none", d, n)
		}
		return ""
	})

	url := fmt.Sprintf("http://127.0.0.1:%d/", lbPort)
	client := &http.Client{Timeout: 30 * time.Second}
	start := time.Now()
	err := getHello(client, url)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("GET at zero instances: %v after %s, want 200 from an instance", err, took)
	}
	t.Logf("scale from zero: first request answered 200 after %s", took)
	// The request was held, not refused: the instance that answered it was created for it.
	if out, err := c.herd("events"); err != nil || !strings.Contains(out, "scaling from zero") {
		t.Fatalf("no scale-from-zero event (err %v):\n%s", err, out)
	}
	if d := c.desired("web"); d < 1 {
		t.Fatalf("desired %d after a request at zero, want >= 1", d)
	}
}
