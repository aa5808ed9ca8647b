package cli

import (
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
)

// waveFleet is a fleet in two regions in the middle of a canary wave: us rolled back, eu never
// reached.
func waveFleet() *v1alpha1.Fleet {
	two := int32(2)
	f := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}, Spec: v1alpha1.FleetSpec{
		Replicas: v1alpha1.Replicas{Min: &two, Max: &two, Desired: &two},
		Rollout:  v1alpha1.Rollout{Strategy: v1alpha1.StrategyCanary, Steps: []v1alpha1.CanaryStep{{Weight: 50}}, RegionOrder: []string{"us"}},
		Regions:  []v1alpha1.Region{{Name: "eu", Provider: "fake"}, {Name: "us", Provider: "fake"}},
	}}
	ro := &v1alpha1.RolloutStatus{Revision: "web-new", PreviousRevision: "web-old", Strategy: v1alpha1.StrategyCanary, Phase: v1alpha1.RolloutRolledBack, Message: "region us: canary 5xx rate 30.0% exceeds 2.0x the stable 0.2%"}
	us := *ro
	us.Message = "canary 5xx rate 30.0%"
	eu := *ro
	eu.Phase, eu.Message = v1alpha1.RolloutWaiting, "the wave stopped before this region: it keeps web-old"
	f.Status = v1alpha1.FleetStatus{CurrentRevision: "web-new", Rollout: ro, Regions: []v1alpha1.RegionStatus{
		{Name: "eu", Desired: 2, Replicas: 2, ReadyReplicas: 2, CurrentRevision: "web-old", Phase: v1alpha1.RegionUnreachable, Message: "no route to region eu", Rollout: &eu},
		{Name: "us", Desired: 2, Replicas: 2, ReadyReplicas: 1, CurrentRevision: "web-old", Phase: v1alpha1.RegionDegraded, Message: "rollout of web-new rolled back", Rollout: &us},
	}}
	return f
}

// get regions prints a line per fleet and region with its counts, revision, state and why.
func TestPrintRegions(t *testing.T) {
	var out, errOut strings.Builder
	g := &globals{out: &out, errOut: &errOut}
	lbs := []apiserver.RegionLB{{Region: "eu", Address: "10.216.0.2", Synced: true}, {Region: "us", Address: "10.216.0.3", Error: "connection refused"}}
	if err := printRegions(g, []v1alpha1.Fleet{*waveFleet()}, lbs, true); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("got %q, want a header and 2 rows", out.String())
	}
	for i, want := range [][]string{
		{"FLEET", "REGION", "DESIRED", "REPLICAS", "READY", "REVISION", "STATE", "PROVIDER", "LB", "LB-STATE", "WAVE", "MESSAGE"},
		{"web", "eu", "2", "2", "2", "web-old", "Unreachable", "fake", "10.216.0.2", "Synced", "Waiting", "no route to region eu"},
		{"web", "us", "2", "2", "1", "web-old", "Degraded", "fake", "10.216.0.3", "Error:", "connection", "refused", "RolledBack", "rollout of web-new rolled back"},
	} {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != strings.Join(want, " ") {
			t.Errorf("line %d %q, want %q", i, got, strings.Join(want, " "))
		}
	}
}

// describe groups instances by region, in the spec's order, and shows each region's state.
func TestDescribeFleetByRegion(t *testing.T) {
	f := waveFleet()
	insts := []v1alpha1.Instance{
		{Metadata: v1alpha1.ObjectMeta{Name: "web-us1"}, Spec: v1alpha1.InstanceSpec{Region: "us", Revision: "web-old"}},
		{Metadata: v1alpha1.ObjectMeta{Name: "web-eu1"}, Spec: v1alpha1.InstanceSpec{Region: "eu", Revision: "web-old"}},
		{Metadata: v1alpha1.ObjectMeta{Name: "web-us2"}, Spec: v1alpha1.InstanceSpec{Region: "us", Revision: "web-old"}},
	}
	var b strings.Builder
	describeFleet(&b, f)
	describeInstances(&b, f, insts)
	out := b.String()
	for _, want := range []string{
		"  eu on fake: Unreachable, 2 desired | 2 ready | 2 total, revision web-old\n    no route to region eu\n",
		"  us on fake: Degraded, 2 desired | 1 ready | 2 total, revision web-old\n",
		"    wave: RolledBack web-old -> web-new canary 5xx rate 30.0%\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("describe lacks %q:\n%s", want, out)
		}
	}
	_, instances, _ := strings.Cut(out, "Instances:\n")
	eu, us := strings.Index(instances, "  eu (1):\n"), strings.Index(instances, "  us (2):\n")
	if eu < 0 || us < eu || !strings.Contains(instances[us:], "web-us1") || !strings.Contains(instances[us:], "web-us2") || strings.Contains(instances[:us], "web-us") {
		t.Errorf("instances not grouped eu then us:\n%s", instances)
	}
}

// rollout status shows each region's part of a wave, in the wave's order.
func TestRolloutLineWave(t *testing.T) {
	got := rolloutLine(waveFleet())
	lines := strings.Split(got, "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "  region us: RolledBack") || !strings.HasPrefix(lines[2], "  region eu: Waiting") {
		t.Fatalf("rollout status %q, want the fleet's line then us and eu", got)
	}
	if strings.Contains(lines[0], "step") {
		t.Errorf("fleet line %q names a step: in a wave each region has its own", lines[0])
	}
}

// A fleet in one region without options is served by herd up's own load balancer; a fleet
// served regionally whose region has no load balancer yet says so.
func TestRegionRowsLB(t *testing.T) {
	quick := v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "quick"}, Spec: v1alpha1.FleetSpec{Regions: []v1alpha1.Region{{Name: "default"}}}}
	web := *waveFleet()
	rows := withLBs(regionRows([]v1alpha1.Fleet{quick, web}), []v1alpha1.Fleet{quick, web}, []apiserver.RegionLB{{Region: "eu", Address: "10.216.0.2", Synced: true}})
	var got []string
	for _, r := range rows {
		got = append(got, r.Fleet+"/"+r.Name+" "+r.LB+" "+r.LBState)
	}
	want := []string{"quick/default herd-up -", "web/eu 10.216.0.2 Synced", "web/us - None"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("rows %q, want %q", got, want)
	}
}

// get rtt prints one line per client network and region; describe shows the front door's
// listeners of the fleet only.
func TestPrintRTTAndFront(t *testing.T) {
	var out, errOut strings.Builder
	g := &globals{out: &out, errOut: &errOut}
	if err := printRTT(g, nil); err != nil || out.Len() != 0 || !strings.Contains(errOut.String(), "No round trips") {
		t.Errorf("empty: %v %q %q", err, out.String(), errOut.String())
	}
	rtts := []apiserver.ClientRTT{{Network: "10.216.1.0/24", Region: "eu", SRTTms: 10.967, Samples: 4}, {Network: "10.216.1.0/24", Region: "us", SRTTms: 111.742, Samples: 3}}
	if err := printRTT(g, rtts); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(strings.Join(strings.Fields(lines[1]), " "), "10.216.1.0/24 eu 11.0ms 4") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[2]), " "), "10.216.1.0/24 us 111.7ms 3") {
		t.Errorf("get rtt:\n%s", out.String())
	}

	out.Reset()
	fd := &apiserver.FrontDoor{Address: "10.216.0.3", Synced: true, Listeners: []apiserver.FrontListener{
		{Name: "web/http", Fleet: "web", Port: 8080, Regions: []string{"us", "eu"}},
		{Name: "db/tcp", Fleet: "db", Port: 5432, Regions: []string{"eu"}},
	}, Regions: []apiserver.FrontRegion{
		{Listener: "web/http", Region: "us", State: "healthy", RTTms: 61.24, LastError: "an old failure, healed since"},
		{Listener: "web/http", Region: "eu", State: "unhealthy", RTTms: 20.1, LastError: "health check: timeout"},
		{Listener: "db/tcp", Region: "eu", State: "healthy"},
	}}
	describeFront(&out, "web", fd)
	if want := "Front door:         Synced\n  web/http: 10.216.0.3:8080 -> regions us, eu\n    region us: healthy, round trip 61.2ms\n" +
		"    region eu: unhealthy, round trip 20.1ms (health check: timeout)\n"; out.String() != want {
		t.Errorf("describe:\n%q\nwant\n%q", out.String(), want)
	}
	out.Reset()
	describeFront(&out, "quick", fd)
	if out.Len() != 0 {
		t.Errorf("a fleet the front door does not serve: %q", out.String())
	}
}
