package route53sync_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/route53"
	"github.com/aws/aws-sdk-go-v2/service/route53/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/route53sync"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

// world is what herd's routes are computed from: fleets, Ready instances, the regions'
// addresses and the clients' side verdict of each region.
type world struct {
	mu          sync.Mutex
	fleets      []*v1alpha1.Fleet
	unreachable map[string]bool
}

var addrs = map[string][]netip.Addr{
	"eu": {netip.MustParseAddr("10.216.0.1"), netip.MustParseAddr("2001:db8:1::1")},
	"us": {netip.MustParseAddr("10.216.0.2")},
}

func (w *world) RegionLBAddresses(_ context.Context, region string) ([]netip.Addr, error) {
	return addrs[region], nil
}

func (w *world) RegionUnreachable(region string) (string, bool) {
	return "probe timed out", w.unreachable[region]
}

// table is herd's routes as herd up computes them, health verdicts included.
func (w *world) table(ctx context.Context) (routes.Table, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ready := map[routes.FleetRegion]int32{}
	for _, f := range w.fleets {
		for _, r := range f.Spec.Regions {
			ready[routes.FleetRegion{Fleet: f.Metadata.Name, Region: r.Name}] = 3
		}
	}
	return routes.Compute(ctx, routes.Inputs{Fleets: w.fleets, Ready: ready, LB: w, Reach: w}), nil
}

func (w *world) set(f func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	f()
}

func fleet(name string, policy v1alpha1.RoutingPolicy) *v1alpha1.Fleet {
	f := &v1alpha1.Fleet{
		Metadata: v1alpha1.ObjectMeta{Name: name},
		Spec: v1alpha1.FleetSpec{
			Listeners: []v1alpha1.Listener{{Port: 8080, InstancePort: 30080}},
			Regions:   []v1alpha1.Region{{Name: "eu"}, {Name: "us"}},
			Global:    &v1alpha1.Global{Hostname: name + ".herd.test", Policy: policy, Weights: map[string]int32{"eu": 3, "us": 1}},
		},
	}
	v1alpha1.SetFleetDefaults(f, "local")
	return f
}

// sets lists the zone as "name type id: values" lines, sorted.
func sets(tw *awstwin.Twin, zone string) []string {
	var out []string
	for _, rs := range tw.RecordSets(zone) {
		var v []string
		for _, r := range rs.Records {
			v = append(v, r.Value)
		}
		line := fmt.Sprintf("%s %s %s: %s", rs.Name, rs.Type, rs.SetIdentifier, strings.Join(v, " "))
		if rs.Weight != nil {
			line += fmt.Sprintf(" weight %d", *rs.Weight)
		}
		out = append(out, line)
	}
	slices.Sort(out)
	return out
}

// herds are the lines of the zone herd keeps: the fleets' hostnames and owner records.
func herds(all []string) []string {
	return slices.DeleteFunc(slices.Clone(all), func(l string) bool {
		fleetHost := (strings.HasPrefix(l, "hello.") || strings.HasPrefix(l, "web.")) && !strings.Contains(l, " TXT ")
		return !fleetHost && !strings.Contains(l, "herd/installation=test-installation")
	})
}

func waitFor(t *testing.T, tw *awstwin.Twin, zone, what string, want []string) {
	t.Helper()
	want = slices.Sorted(slices.Values(want))
	var got []string
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		got = herds(sets(tw, zone))
		return slices.Equal(got, want), nil
	}); err != nil {
		t.Fatalf("%s: the zone holds\n%s\nwant\n%s", what, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func upsert(rs *types.ResourceRecordSet) types.Change {
	return types.Change{Action: types.ChangeActionUpsert, ResourceRecordSet: rs}
}

func simple(name string, typ types.RRType, value string) *types.ResourceRecordSet {
	return &types.ResourceRecordSet{Name: aws.String(name), Type: typ, TTL: aws.Int64(60), ResourceRecords: []types.ResourceRecord{{Value: aws.String(value)}}}
}

const (
	helloOwner = `_herd.hello.herd.test. TXT : "heritage=herd,herd/installation=test-installation,herd/fleet=hello"`
	webOwner   = `_herd.web.herd.test. TXT : "heritage=herd,herd/installation=test-installation,herd/fleet=web"`
	helloEU4   = "hello.herd.test. A eu: 10.216.0.1 weight 3"
	helloEU6   = "hello.herd.test. AAAA eu: 2001:db8:1::1 weight 3"
	helloUS4   = "hello.herd.test. A us: 10.216.0.2 weight 1"
)

// The zone follows herd's routes: a weighted fleet's healthy regions, a failover fleet's first
// healthy region; a region that herd's health verdict withdraws leaves the zone and comes back
// through PriorRequestNotComplete and throttling; a deleted fleet's records and owner record
// leave it; and records herd did not create (another's hostname, another installation's, a TXT
// at herd's own hostname) are never touched.
func TestZoneFollowsHerdsRoutes(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	zone := tw.AddHostedZone("herd.test.")
	client := tw.Route53Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// What others keep in the zone, before herd.
	if _, err := client.ChangeResourceRecordSets(ctx, &route53.ChangeResourceRecordSetsInput{HostedZoneId: aws.String(zone), ChangeBatch: &types.ChangeBatch{Changes: []types.Change{
		upsert(simple("www.herd.test.", types.RRTypeA, "192.0.2.10")),
		upsert(simple("hello.herd.test.", types.RRTypeTxt, `"site-verification=abc"`)),
		upsert(simple("taken.herd.test.", types.RRTypeA, "192.0.2.11")),
		upsert(simple("other.herd.test.", types.RRTypeA, "192.0.2.12")),
		upsert(simple("_herd.other.herd.test.", types.RRTypeTxt, `"heritage=herd,herd/installation=another,herd/fleet=other"`)),
	}}}); err != nil {
		t.Fatal(err)
	}
	foreign := sets(tw, zone)

	w := &world{fleets: []*v1alpha1.Fleet{fleet("hello", v1alpha1.PolicyWeighted), fleet("web", v1alpha1.PolicyFailover), fleet("taken", v1alpha1.PolicyFailover)}, unreachable: map[string]bool{}}
	s, err := route53sync.New(route53sync.Options{ZoneID: zone, Installation: "test-installation", Client: client, Table: w.table,
		Interval: 20 * time.Millisecond, MaxBatch: 10})
	if err != nil {
		t.Fatal(err)
	}

	// One pass, in two batches: hello's 8 records (upserts count twice) and web's 4 do not fit in 10.
	tab, _ := w.table(ctx)
	before := tw.Calls()["ChangeResourceRecordSets"]
	if err := s.Sync(ctx, tab); err != nil {
		t.Fatal(err)
	}
	if n := tw.Calls()["ChangeResourceRecordSets"] - before; n != 2 {
		t.Errorf("%d change batches, want 2 of at most 10 records", n)
	}
	all := []string{helloOwner, webOwner, helloEU4, helloEU6, helloUS4, "web.herd.test. A : 10.216.0.1", "web.herd.test. AAAA : 2001:db8:1::1"}
	slices.Sort(all)
	waitFor(t, tw, zone, "first pass", all)

	done := make(chan error)
	go func() { done <- s.Run(ctx) }()

	// us unreachable from the clients' side: herd withdraws it, so does the zone.
	w.set(func() { w.unreachable["us"] = true })
	noUS := slices.DeleteFunc(slices.Clone(all), func(l string) bool { return l == helloUS4 })
	waitFor(t, tw, zone, "us withdrawn", noUS)

	// us back, through a zone still busy and throttling; then eu withdrawn: web fails over to us.
	tw.PriorRequestNotComplete(2)
	tw.Throttle(1)
	w.set(func() { w.unreachable["us"] = false })
	waitFor(t, tw, zone, "us back", all)
	w.set(func() { w.unreachable["eu"] = true })
	waitFor(t, tw, zone, "eu withdrawn", []string{helloOwner, webOwner, helloUS4, "web.herd.test. A : 10.216.0.2"})

	// Fleet web deleted: its records and owner record leave the zone.
	w.set(func() { w.fleets = w.fleets[:1]; w.unreachable["eu"] = false })
	waitFor(t, tw, zone, "web deleted", []string{helloOwner, helloEU4, helloEU6, helloUS4})
	if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return s.InSync(), nil
	}); err != nil {
		t.Fatal("Route 53 never said INSYNC of the last change")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	var left []string
	for _, l := range sets(tw, zone) {
		if !slices.Contains(herds([]string{l}), l) {
			left = append(left, l)
		}
	}
	if !slices.Equal(left, foreign) {
		t.Errorf("records herd did not create changed:\n%s\nwere\n%s", strings.Join(left, "\n"), strings.Join(foreign, "\n"))
	}
}
