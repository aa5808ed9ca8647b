package health_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/global/health"
	"herd.dev/herd/internal/provider/local/regiontest"
)

// TestIntegrationRegionUnreachable probes a real region's load balancer from the internet
// namespace and partitions the region's link: the region reads unreachable (the figure printed
// is the detection time, which the design bounds at 3 s), and reachable again once restored.
func TestIntegrationRegionUnreachable(t *testing.T) {
	p := regiontest.Provider(t, []string{"away"}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nets := p.RegionNetworks()
	lb, err := nets.EnsureRegion(ctx, "away", map[string]string{"latency": "20ms"})
	if err != nil {
		t.Fatal(err)
	}
	var changes atomic.Int64
	c, err := health.New(health.Options{
		Targets:  func() []health.Target { return []health.Target{{Region: "away", Address: lb.DataAddress}} },
		Dial:     nets.DialFromClients,
		OnChange: func(string) { changes.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	unreachable := func() bool { _, u := c.RegionUnreachable("away"); return u }
	wait := func(what string, within time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > within {
				t.Fatalf("%s: not within %s", what, within)
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(start)
	}
	// A first verdict: reachable (the router refuses the probe's port, which is an answer).
	wait("a first verdict", 10*time.Second, func() bool {
		s := c.Status()
		return len(s) == 1 && s[0].Reachable
	})

	for round := range 2 {
		if err := nets.Partition(ctx, "away"); err != nil {
			t.Fatal(err)
		}
		took := wait("the partitioned region to read unreachable", 10*time.Second, unreachable)
		t.Logf("round %d: partition detected after %s", round, took.Round(time.Millisecond))
		why, _ := c.RegionUnreachable("away")
		t.Logf("reason: %s", why)
		if err := nets.Restore(ctx, "away"); err != nil {
			t.Fatal(err)
		}
		took = wait("the restored region to read reachable", 10*time.Second, func() bool { return !unreachable() })
		t.Logf("round %d: restore detected after %s", round, took.Round(time.Millisecond))
	}
	if n := changes.Load(); n != 4 {
		t.Errorf("OnChange called %d times, want 4 (down, up, down, up)", n)
	}
}
