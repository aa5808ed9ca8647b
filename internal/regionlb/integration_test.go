package regionlb_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/lbsync/lbsynctest"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/regiontest"
	"herd.dev/herd/internal/regionlb"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// TestIntegrationRegionalLB configures two real regional load balancers from the store, each
// with its own region's targets; a client on the internet reaches each region through its own
// load balancer. The configurer stops (herd up is down): the load balancers keep serving. A new
// one starts (herd up is back) and re-syncs them under load without a failed request.
func TestIntegrationRegionalLB(t *testing.T) {
	p := regiontest.Provider(t, []string{"eu", "us"}, []string{"home"})
	ctx := context.Background()
	client, err := p.Lab().AddClient(ctx, "home", netlab.Shape{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	addrs, port := lbsynctest.ServeInRegions(t, p, map[string]string{"eu": "10ms", "us": "10ms"}, func(region string) string { return "hello from " + region })
	st := memory.New()
	defer st.Close()
	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: int32(port), Protocol: v1alpha1.ProtocolHTTP}},
		Regions: []v1alpha1.Region{{Name: "eu", Provider: local.Name, Options: map[string]string{"latency": "10ms"}},
			{Name: "us", Provider: local.Name, Options: map[string]string{"latency": "10ms"}}},
	}})
	lbsynctest.PutReadyInstances(t, st, addrs)

	run := func() (*regionlb.Regional, func()) {
		r := regionlb.New(regionlb.Options{Networks: map[string]regionnet.Networks{local.Name: p.RegionNetworks()}})
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = r.Run(rctx, lbsynctest.Informer(t, st)) }()
		return r, func() { cancel(); <-done }
	}
	r, stop := run()
	hc := regiontest.HTTPClient(client.Netns, 5*time.Second)
	urls := map[string]string{}
	deadline := time.Now().Add(60 * time.Second)
	for _, region := range []string{"eu", "us"} {
		for {
			var lb regionlb.Status
			for _, b := range r.Balancers() {
				if b.Region == region {
					lb = b
				}
			}
			if lb.Synced {
				urls[region] = fmt.Sprintf("http://%s:8080/", lb.DataAddress)
				if body, err := lbsynctest.Get(hc, urls[region]); err == nil && body == "hello from "+region {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("region %s's load balancer does not serve its region's target: %+v", region, r.Balancers())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	t.Logf("each region's load balancer serves its own region: %v", urls)

	// Load on both regions for the rest of the test.
	var ok, failed atomic.Int64
	var firstErr atomic.Value
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for region, u := range urls {
		wg.Go(func() {
			for loadCtx.Err() == nil {
				body, err := lbsynctest.Get(hc, u)
				if err == nil && body != "hello from "+region {
					err = fmt.Errorf("%s answered %q", u, body)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				ok.Add(1)
			}
		})
	}
	waitCount := func(n int64) {
		t.Helper()
		target := ok.Load() + n
		deadline := time.Now().Add(30 * time.Second)
		for ok.Load() < target {
			if time.Now().After(deadline) {
				t.Fatalf("load stalled at %d requests (%d failed, first: %v)", ok.Load(), failed.Load(), firstErr.Load())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitCount(200)

	stop() // herd up goes down: the regional load balancers are processes of their own
	downFrom := ok.Load()
	time.Sleep(3 * time.Second) // a span of control-plane downtime, under load
	t.Logf("with the configurer down for 3s: %d requests served, %d failed", ok.Load()-downFrom, failed.Load())

	r2, stop2 := run() // herd up is back: it adopts and re-syncs them
	defer stop2()
	deadline = time.Now().Add(30 * time.Second)
	for b := r2.Balancers(); len(b) != 2 || !b[0].Synced || !b[1].Synced; b = r2.Balancers() {
		if time.Now().After(deadline) {
			t.Fatalf("the new configurer did not sync the load balancers: %+v", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitCount(200)
	stopLoad()
	wg.Wait()
	t.Logf("%d requests through the regional load balancers, %d failed", ok.Load(), failed.Load())
	if failed.Load() != 0 {
		t.Fatalf("%d requests failed, first: %v", failed.Load(), firstErr.Load())
	}
}
