package routes

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

type fakeLB map[string][]netip.Addr

func (f fakeLB) RegionLBAddresses(_ context.Context, region string) ([]netip.Addr, error) {
	if region == "broken" {
		return nil, errors.New("provider down")
	}
	return f[region], nil
}

type fakeReach map[string]string

func (f fakeReach) RegionUnreachable(region string) (string, bool) {
	why, ok := f[region]
	return why, ok
}

type fakeRTT map[netip.Prefix]map[string]time.Duration

func (f fakeRTT) ClientRTTs() map[netip.Prefix]map[string]time.Duration { return f }

func instance(fleet, region string, phase v1alpha1.InstancePhase) *v1alpha1.Instance {
	return &v1alpha1.Instance{Spec: v1alpha1.InstanceSpec{Fleet: fleet, Region: region}, Status: v1alpha1.InstanceStatus{Phase: phase}}
}

func TestCompute(t *testing.T) {
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "hello"}, Spec: v1alpha1.FleetSpec{
		Regions: []v1alpha1.Region{{Name: "eu"}, {Name: "us"}, {Name: "ap"}, {Name: "sa"}, {Name: "broken"}},
		Global: &v1alpha1.Global{Hostname: "hello.herd.test", Policy: v1alpha1.PolicyFailover, FailoverOrder: []string{"us", "eu"},
			MinHealthyInstances: new(int32(2)), Geo: &v1alpha1.GeoRouting{CIDRs: map[string]string{"10.0.0.0/8": "eu", "10.1.0.0/16": "us"}, Default: "eu"}},
	}}
	plain := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "plain"}}
	in := Inputs{
		Fleets: []*v1alpha1.Fleet{f, plain},
		Instances: []*v1alpha1.Instance{
			instance("hello", "eu", v1alpha1.PhaseReady), instance("hello", "eu", v1alpha1.PhaseReady),
			instance("hello", "us", v1alpha1.PhaseReady), instance("hello", "us", v1alpha1.PhaseBooting),
			instance("hello", "ap", v1alpha1.PhaseReady), instance("hello", "ap", v1alpha1.PhaseReady),
			instance("hello", "sa", v1alpha1.PhaseReady), instance("hello", "sa", v1alpha1.PhaseReady),
			instance("other", "us", v1alpha1.PhaseReady),
		},
		LB: fakeLB{"eu": {netip.MustParseAddr("10.216.0.1")}, "us": {netip.MustParseAddr("10.216.0.2")},
			"ap": {netip.MustParseAddr("10.216.0.3")}},
		Reach: fakeReach{"ap": "3 checks failed"},
		RTT:   fakeRTT{netip.MustParsePrefix("10.9.9.0/24"): {"eu": time.Millisecond}},
	}
	table := Compute(context.Background(), in)
	if len(table.Routes) != 1 || len(table.RTT) != 1 {
		t.Fatalf("routes %d rtt %d, want the one fleet with spec.global and the RTT table", len(table.Routes), len(table.RTT))
	}
	r := table.Routes[0]
	var order []string
	for _, rg := range r.Regions {
		order = append(order, rg.Name)
	}
	if !slices.Equal(order, []string{"us", "eu", "ap", "sa", "broken"}) {
		t.Errorf("region order %v, want failoverOrder then the other regions", order)
	}
	want := map[string]struct {
		healthy bool
		why     string
	}{
		"us":     {false, "1 Ready instances, fewer than minHealthyInstances 2"},
		"eu":     {true, "reachable, 2 Ready instances (min 2)"},
		"ap":     {false, "unreachable from outside the region: 3 checks failed"},
		"sa":     {false, "no load balancer address"},
		"broken": {false, "no load balancer address: provider down"},
	}
	for _, rg := range r.Regions {
		if w := want[rg.Name]; rg.Healthy != w.healthy || rg.Why != w.why {
			t.Errorf("%s: healthy %v why %q, want %v %q", rg.Name, rg.Healthy, rg.Why, w.healthy, w.why)
		}
	}
	if got := r.Answer(); !slices.Equal(got, []string{"out", "primary", "out", "out", "out"}) {
		t.Errorf("answer %v, want eu primary and the rest out", got)
	}
	if r.Geo[0].Prefix.Bits() != 16 || r.Geo[0].Region != "us" {
		t.Errorf("geo %v, want the longest prefix first", r.Geo)
	}

	// No region healthy: every region with an address answers.
	in.Reach = fakeReach{"eu": "cut", "us": "cut", "ap": "cut"}
	r = Compute(context.Background(), in).Routes[0]
	if got := strings.Join(r.Answer(), ","); got != "in (fail open),in (fail open),in (fail open),out,out" {
		t.Errorf("fail open answer %s", got)
	}
}

// A published fleet has a discovery route with the addresses inside its regions, healthy with one
// Ready instance even when the region is unreachable from outside; the instances are the callers.
func TestComputeDiscovery(t *testing.T) {
	api := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "api"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Port: 8081, InstancePort: 30080}},
		Regions:   []v1alpha1.Region{{Name: "eu"}, {Name: "us"}},
		Discovery: &v1alpha1.Discovery{AllowFrom: []string{"web"}},
	}}
	v1alpha1.SetFleetDefaults(api, "local")
	ready := instance("api", "eu", v1alpha1.PhaseReady)
	ready.Status.Address = "10.213.1.10"
	web := instance("web", "us", v1alpha1.PhaseBooting)
	web.Status.Address = "10.213.2.11"
	tab := Compute(context.Background(), Inputs{
		Published: []*v1alpha1.Fleet{api}, Instances: []*v1alpha1.Instance{ready, web},
		LB:         fakeLB{"eu": {netip.MustParseAddr("10.216.0.1")}},
		InstanceLB: fakeLB{"eu": {netip.MustParseAddr("10.213.1.2")}, "us": {netip.MustParseAddr("10.213.2.2")}},
		Reach:      fakeReach{"eu": "partitioned"},
	})
	if len(tab.Discovery) != 1 || tab.Discovery[0].Hostname != "api" || !slices.Equal(tab.Discovery[0].AllowFrom, []string{"web"}) || tab.Discovery[0].Port != 8081 {
		t.Fatalf("discovery routes %+v, want api allowing web, the name alone reaching port 8081", tab.Discovery)
	}
	eu, us := tab.Discovery[0].Regions[0], tab.Discovery[0].Regions[1]
	if !eu.Healthy || eu.Addresses[0] != netip.MustParseAddr("10.213.1.2") || us.Healthy || us.Why != "0 Ready instances, fewer than minHealthyInstances 1" {
		t.Errorf("regions eu %+v us %+v, want eu healthy at its inside address, us without Ready instances", eu, us)
	}
	if got := tab.Callers[netip.MustParseAddr("10.213.2.11")]; got != (FleetRegion{"web", "us"}) || len(tab.Callers) != 2 {
		t.Errorf("callers %v, want both instances, web's in us", tab.Callers)
	}
}

// A published fleet that no region's load balancer serves (one region, no options) is answered
// with herd up's own load balancer's address in its region, not the region's load balancer's,
// which other fleets' listeners run on and its own do not.
func TestComputeDiscoveryEmbedded(t *testing.T) {
	api := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "api"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Port: 8081, InstancePort: 30080}},
		Regions:   []v1alpha1.Region{{Name: "eu"}, {Name: "us"}},
	}}
	web := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Listeners: []v1alpha1.Listener{{Port: 8082, InstancePort: 30080}},
		Regions:   []v1alpha1.Region{{Name: "eu"}},
	}}
	v1alpha1.SetFleetDefaults(api, "local")
	v1alpha1.SetFleetDefaults(web, "local")
	in := Inputs{
		Published:  []*v1alpha1.Fleet{api, web},
		InstanceLB: fakeLB{"eu": {netip.MustParseAddr("10.213.1.2")}, "us": {netip.MustParseAddr("10.213.2.2")}},
		EmbeddedLB: fakeLB{"eu": {netip.MustParseAddr("10.213.1.1")}},
		Regional:   func(f *v1alpha1.Fleet) bool { return len(f.Spec.Regions) > 1 },
	}
	got := map[string]string{}
	for _, r := range Compute(context.Background(), in).Discovery {
		for _, rg := range r.Regions {
			got[r.Hostname+" "+rg.Name] = fmt.Sprint(rg.Addresses)
		}
	}
	want := map[string]string{"api eu": "[10.213.1.2]", "api us": "[10.213.2.2]", "web eu": "[10.213.1.1]"}
	if !maps.Equal(got, want) {
		t.Errorf("discovery addresses %v, want %v", got, want)
	}
	// Without Regional every fleet has the regions' addresses, as before.
	in.Regional = nil
	if r := Compute(context.Background(), in).Discovery[1]; r.Hostname != "web" || r.Regions[0].Addresses[0] != netip.MustParseAddr("10.213.1.2") {
		t.Errorf("without Regional web's route is %+v, want eu's load balancer", r)
	}
}
