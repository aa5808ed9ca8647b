package chaos_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/chaos"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/regiontest"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// TestIntegrationChaosRegion partitions and degrades a real region network through the chaos
// engine, as herd chaos does, and measures from a client network: a degraded region is as far
// as asked, a partitioned one does not answer, and each comes back when stopped or when its
// duration ends.
func TestIntegrationChaosRegion(t *testing.T) {
	p := regiontest.Provider(t, []string{"eu"}, []string{"home"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, err := p.Lab().AddClient(ctx, "home", netlab.Shape{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rn, err := p.Lab().EnsureNetwork(ctx, "eu", nil)
	if err != nil {
		t.Fatal(err)
	}
	// Something listening in the router, so that a connect takes one round trip.
	var ln net.Listener
	if err := regiontest.InNetns(rn.RouterNetns, func() (err error) { ln, err = net.Listen("tcp", ":7000"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	addr := net.JoinHostPort(rn.WANAddress.String(), "7000")
	connect := func(timeout time.Duration) (time.Duration, error) {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		c, err := regiontest.DialIn(cctx, client.Netns, "tcp", addr)
		if err != nil {
			return 0, err
		}
		c.Close()
		return time.Since(start), nil
	}
	median := func(n int) time.Duration {
		var ds []time.Duration
		for range n {
			if d, err := connect(5 * time.Second); err == nil {
				ds = append(ds, d)
			}
		}
		if len(ds) == 0 {
			t.Fatal("no connect succeeded")
		}
		slices.Sort(ds)
		return ds[len(ds)/2]
	}

	st := memory.New()
	defer st.Close()
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Regions: []v1alpha1.Region{{Name: "eu", Provider: local.Name}}}}
	op, _ := store.PutOp(store.Fleets, f)
	if _, err := st.Txn(ctx, op); err != nil {
		t.Fatal(err)
	}
	e, err := chaos.New(chaos.Options{Store: st, Providers: map[string]provider.Provider{local.Name: p}, Networks: map[string]regionnet.Chaos{local.Name: p.Lab()}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(ctx) }()
	defer func() { cancel(); <-done }()

	base := median(7)
	t.Logf("before: TCP connect median %s", base)

	d, err := e.Start(ctx, v1alpha1.ChaosActionSpec{Action: v1alpha1.ChaosDegradeRegion, Target: "eu",
		Latency: v1alpha1.D(300 * time.Millisecond), Loss: 0.2, Duration: v1alpha1.D(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	degraded := median(9)
	t.Logf("degrade-region eu --latency 300ms --loss 20%%: TCP connect median %s", degraded)
	if degraded < 300*time.Millisecond {
		t.Errorf("degraded by 300ms, the median connect takes %s", degraded)
	}
	if _, err := e.Stop(ctx, d.Metadata.Name); err != nil {
		t.Fatal(err)
	}
	if after := median(7); after >= 300*time.Millisecond {
		t.Errorf("after stop, the median connect still takes %s", after)
	}

	a, err := e.Start(ctx, v1alpha1.ChaosActionSpec{Action: v1alpha1.ChaosPartitionRegion, Target: "eu", Duration: v1alpha1.D(3 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	if _, err := connect(time.Second); err == nil {
		t.Fatal("the client reaches the partitioned region")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		got, err := e.Get(ctx, a.Metadata.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.Phase == v1alpha1.ChaosEnded {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the partition of 3s is still %s", got.Status.Phase)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("partition-region eu --duration 3s ended after %s", time.Since(started).Round(time.Millisecond))
	if _, err := connect(5 * time.Second); err != nil {
		t.Fatalf("the client does not reach the region after the partition ended: %v", err)
	}
}
