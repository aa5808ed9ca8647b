package front_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/front"
	"herd.dev/herd/internal/global/rtt"
	"herd.dev/herd/internal/lbsync/lbsynctest"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/regiontest"
	"herd.dev/herd/internal/regionlb"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// TestIntegrationFrontAndRTTs: on real region networks (near 10 ms, far 60 ms away), the store's
// fleet in both regions gets the front door configured by front.Sync, which sends a client's requests
// to the near region; and rtt.Collector gathers, from the regional load balancers' own tables, two client
// networks that rank the regions the other way round from each other.
func TestIntegrationFrontAndRTTs(t *testing.T) {
	p := regiontest.Provider(t, []string{"near", "far"}, []string{"home", "remote"})
	ctx := context.Background()
	latency := map[string]time.Duration{"near": 10 * time.Millisecond, "far": 60 * time.Millisecond}
	home, err := p.Lab().AddClient(ctx, "home", netlab.Shape{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := p.Lab().AddClient(ctx, "remote", netlab.Shape{}, map[string]time.Duration{"near": 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	addrs, port := lbsynctest.ServeInRegions(t, p, map[string]string{"near": latency["near"].String(), "far": latency["far"].String()},
		func(region string) string { return region })
	st := memory.New()
	defer st.Close()
	// Far first in the spec: the front door must rank regions by distance, not by order.
	lbsynctest.Put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners:   []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: int32(port), Protocol: v1alpha1.ProtocolHTTP}},
		HealthCheck: v1alpha1.HealthCheck{Path: "/", Port: int32(port)},
		Regions: []v1alpha1.Region{{Name: "far", Provider: local.Name, Options: map[string]string{"latency": "60ms"}},
			{Name: "near", Provider: local.Name, Options: map[string]string{"latency": "10ms"}}},
	}})
	lbsynctest.PutReadyInstances(t, st, addrs)

	networks := map[string]regionnet.Networks{local.Name: p.RegionNetworks()}
	var door *front.Sync
	regional := regionlb.New(regionlb.Options{Networks: networks, Applied: func() { door.Kick() }})
	door = front.NewSync(front.SyncOptions{Networks: networks, Regions: regional.Balancers})
	rtts := rtt.New(rtt.Options{Sources: regional.RTTSources, Interval: 500 * time.Millisecond})
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inf := lbsynctest.Informer(t, st)
	go regional.Run(rctx, inf)
	go door.Run(rctx, inf)
	go rtts.Run(rctx)

	// The front door serves the fleet's listener on its own address, from the near region.
	start := time.Now()
	deadline := start.Add(60 * time.Second)
	var fs front.Status
	for fs = door.Status(); !fs.Synced || len(fs.Listeners) != 1 || len(fs.Listeners[0].Regions) != 2; fs = door.Status() {
		if time.Now().After(deadline) {
			t.Fatalf("the front door was not configured with both regions within 60s: %+v (regions %+v)", fs, regional.Balancers())
		}
		time.Sleep(50 * time.Millisecond)
	}
	url := fmt.Sprintf("http://%s/", net.JoinHostPort(fs.DataAddress.String(), "8080"))
	hc := regiontest.HTTPClient(home.Netns, 5*time.Second)
	var body string
	for body != "near" {
		if time.Now().After(deadline) {
			t.Fatalf("GET %s from the client: %q, want the near region's answer", url, body)
		}
		body, _ = lbsynctest.Get(hc, url)
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("front door at %s serves web/http from the near region, %s after the configurers started", url, time.Since(start).Round(time.Millisecond))
	for range 20 {
		if body, err := lbsynctest.Get(hc, url); err != nil || body != "near" {
			t.Fatalf("GET %s: %q %v, want every answer from the near region", url, body, err)
		}
	}

	// Each client network talks to each region's load balancer; the collector shows each on its own /24.
	want := map[string]map[string]time.Duration{
		home.Network:   {"near": latency["near"], "far": latency["far"]},
		remote.Network: {"near": latency["near"] + 100*time.Millisecond, "far": latency["far"]},
	}
	for _, c := range []netlab.ClientNetwork{home, remote} {
		for _, b := range regional.Balancers() {
			u := fmt.Sprintf("http://%s/", net.JoinHostPort(b.DataAddress.String(), "8080"))
			for range 3 {
				// A client of its own each time: a new connection, sampled after its request.
				if body, err := lbsynctest.Get(regiontest.HTTPClient(c.Netns, 5*time.Second), u); err != nil || body != b.Region {
					t.Fatalf("GET %s from %s: %q %v", u, c.Name, body, err)
				}
			}
		}
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		got := rtts.ClientRTTs()
		done := true
		for network, regions := range want {
			for region := range regions {
				if got[netip.MustParsePrefix(network)][region] == 0 {
					done = false
				}
			}
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the RTT collector has not every client network in every region within 10s: %v", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := rtts.ClientRTTs()
	for network, regions := range want {
		for region, w := range regions {
			d := got[netip.MustParsePrefix(network)][region]
			t.Logf("client network %s -> region %s: %s (its links add up to %s)", network, region, d, w)
			if d < w*8/10 || d > w*3/2+20*time.Millisecond {
				t.Errorf("client network %s -> region %s: %s, far from the %s its links add up to", network, region, d, w)
			}
		}
	}
	if h, r := got[netip.MustParsePrefix(home.Network)], got[netip.MustParsePrefix(remote.Network)]; !(h["near"] < h["far"] && r["far"] < r["near"]) {
		t.Errorf("home ranks near %s / far %s and remote near %s / far %s: want home nearer to near and remote nearer to far", h["near"], h["far"], r["near"], r["far"])
	}
}
