package controlplane_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIntegrationAutoscaleOnLoadStep runs herd up with the fake provider, whose instances' workloads
// are real HTTP servers on 127.1.0.x, and a fleet autoscaled at 50 requests per second per
// instance. A client sending about 200 requests per second through herd's load balancer must make
// the autoscaler raise desired to at least 4; how soon is logged as a figure.
func TestIntegrationAutoscaleOnLoadStep(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	c, lbPort := loopbackFleet(t, 8, nil, `  replicas: {min: 1, max: 8, desired: 1}
  autoscaling: {metric: requestsPerSecond, target: 50, scaleInStabilization: 300s}
  regions: [{name: local, options: {bootDelay: 100ms}}]
`)
	c.waitFor(15*time.Second, func() string {
		insts := c.instances()
		if len(insts) != 1 || insts[0].Status.LBHealth != "healthy" {
			return fmt.Sprintf("%d instances, want 1 healthy in the load balancer", len(insts))
		}
		return ""
	})
	if d := c.desired("web"); d != 1 {
		t.Fatalf("desired %d before any load, want 1", d)
	}

	// About 200 requests per second: one every 5 ms.
	url := fmt.Sprintf("http://127.0.0.1:%d/", lbPort)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	stop := make(chan struct{})
	var sent, failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() {
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			wg.Go(func() {
				sent.Add(1)
				if getHello(client, url) != nil {
					failed.Add(1)
				}
			})
		}
	})
	defer func() {
		close(stop)
		wg.Wait()
	}()
	var decision time.Duration
	c.waitFor(10*time.Second, func() string {
		if d := c.desired("web"); d < 4 {
			return fmt.Sprintf("desired %d under ~200 rps, want >= 4", d)
		}
		decision = time.Since(start)
		return ""
	})
	rate := float64(sent.Load()) / time.Since(start).Seconds()
	// The decision time is a figure (target 2 s, measured on real instances by make
	// bench-autoscale), not an assertion.
	t.Logf("autoscale: decision_s=%.3f (desired >= 4 at ~%.0f rps offered, %d requests, %d failed)", decision.Seconds(), rate, sent.Load(), failed.Load())
}
