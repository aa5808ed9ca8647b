package dns

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/events/eventstest"
	"herd.dev/herd/internal/global/routes"
)

// eventLines returns r's events as "Object Type Reason: message" lines.
func eventLines(r *eventstest.Recorder) []string {
	var out []string
	for _, e := range r.Events() {
		out = append(out, e.Object+" "+e.Type+" "+e.Reason+": "+e.Message)
	}
	return out
}

var (
	euAddr   = netip.MustParseAddr("10.0.1.1")
	euAddr6  = netip.MustParseAddr("2001:db8::1")
	usAddr   = netip.MustParseAddr("10.0.2.1")
	apAddr   = netip.MustParseAddr("10.0.3.1")
	nsAddr   = netip.MustParseAddr("10.0.0.53")
	testZone = "herd.test."
)

func region(name string, healthy bool, addrs ...netip.Addr) routes.RegionRoute {
	why := "reachable, 2 Ready instances (min 1)"
	if !healthy {
		why = "unreachable from outside the region: partitioned"
	}
	return routes.RegionRoute{Name: name, Addresses: addrs, Weight: 1, Ready: 2, MinReady: 1, Reachable: healthy, Healthy: healthy, Why: why}
}

// testTable has one hostname per policy, all regions healthy.
func testTable() routes.Table {
	three := func() []routes.RegionRoute {
		return []routes.RegionRoute{region("eu", true, euAddr, euAddr6), region("us", true, usAddr), region("ap", true, apAddr)}
	}
	weighted := three()
	weighted[0].Weight, weighted[1].Weight, weighted[2].Weight = 3, 1, 0
	var many []netip.Addr
	for i := range 100 {
		many = append(many, netip.AddrFrom4([4]byte{10, 9, byte(i / 250), byte(1 + i%250)}))
	}
	geo := []routes.GeoRule{
		{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Region: "us"},
		{Prefix: netip.MustParsePrefix("10.1.7.0/24"), Region: "ap"},
		{Prefix: netip.MustParsePrefix("2001:db8:aa::/48"), Region: "ap"},
	}
	routes.SortGeo(geo)
	return routes.Table{
		Routes: []routes.Route{
			{Fleet: "big", Hostname: "big.herd.test", Policy: v1alpha1.PolicyFailover, TTLSeconds: 5, Regions: []routes.RegionRoute{region("eu", true, many...)}},
			{Fleet: "deep", Hostname: "deep.app.herd.test", Policy: v1alpha1.PolicyFailover, TTLSeconds: 5, Regions: three()},
			{Fleet: "fo", Hostname: "fo.herd.test", Policy: v1alpha1.PolicyFailover, TTLSeconds: 5, Regions: three()},
			{Fleet: "geo", Hostname: "geo.herd.test", Policy: v1alpha1.PolicyGeo, TTLSeconds: 5, Regions: three(), Geo: geo, GeoDefault: "eu"},
			{Fleet: "lat", Hostname: "lat.herd.test", Policy: v1alpha1.PolicyLatency, TTLSeconds: 5, Regions: three(), Geo: geo, GeoDefault: "eu", LatencyFallback: v1alpha1.PolicyGeo},
			{Fleet: "w", Hostname: "w.herd.test", Policy: v1alpha1.PolicyWeighted, TTLSeconds: 5, Regions: weighted},
		},
		RTT: map[netip.Prefix]map[string]time.Duration{
			netip.MustParsePrefix("10.5.5.0/24"): {"eu": 80 * time.Millisecond, "us": 20 * time.Millisecond, "ap": 150 * time.Millisecond},
			netip.MustParsePrefix("10.6.6.0/24"): {"eu": 10 * time.Millisecond, "us": 90 * time.Millisecond},
		},
	}
}

// startServer serves t on a loopback port and returns the server and its address.
func startServer(t *testing.T, table routes.Table, ev EventRecorder) (*Server, string) {
	t.Helper()
	return serve(t, Options{Zone: testZone, Events: ev, Nameservers: []Nameserver{{Name: "ns1.herd.test", Addresses: []netip.Addr{nsAddr}}}}, table)
}

// serve serves t with a server of opts on a loopback port and returns the server and its address.
func serve(t *testing.T, opts Options, table routes.Table) (*Server, string) {
	t.Helper()
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.Update(table)
	l, err := Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Serve(ctx, l) }()
	t.Cleanup(func() { cancel(); <-done })
	return s, l.Addr().String()
}

// query asks addr over network ("udp" or "tcp") with the options given.
func query(t *testing.T, network, addr, name string, qtype uint16, opts ...func(*mdns.Msg)) *mdns.Msg {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, qtype)
	for _, o := range opts {
		o(m)
	}
	c := &mdns.Client{Net: network, Timeout: 2 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s %s %s: %v", network, name, mdns.TypeToString[qtype], err)
	}
	if r.Id != m.Id || !r.Response {
		t.Fatalf("reply id %d response %v to query %d", r.Id, r.Response, m.Id)
	}
	return r
}

// edns adds an OPT record with the buffer size given.
func edns(size uint16) func(*mdns.Msg) { return func(m *mdns.Msg) { m.SetEdns0(size, false) } }

// ecs adds an OPT record with an EDNS Client Subnet option for prefix.
func ecs(prefix string) func(*mdns.Msg) {
	return func(m *mdns.Msg) {
		p := netip.MustParsePrefix(prefix)
		o := m.IsEdns0()
		if o == nil {
			m.SetEdns0(1232, false)
			o = m.IsEdns0()
		}
		family := uint16(1)
		if p.Addr().Is6() {
			family = 2
		}
		o.Option = append(o.Option, &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, Family: family, SourceNetmask: uint8(p.Bits()), Address: p.Addr().AsSlice()})
	}
}

// addrs returns the A and AAAA addresses of r's answer section.
func addrs(r *mdns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		switch v := rr.(type) {
		case *mdns.A:
			out = append(out, v.A.String())
		case *mdns.AAAA:
			out = append(out, v.AAAA.String())
		}
	}
	return out
}

func replyECS(r *mdns.Msg) *mdns.EDNS0_SUBNET {
	if o := r.IsEdns0(); o != nil {
		for _, e := range o.Option {
			if s, ok := e.(*mdns.EDNS0_SUBNET); ok {
				return s
			}
		}
	}
	return nil
}

func withRegions(t routes.Table, host string, regions ...routes.RegionRoute) routes.Table {
	out := t
	out.Routes = append([]routes.Route(nil), t.Routes...)
	for i := range out.Routes {
		if out.Routes[i].Hostname == host {
			out.Routes[i].Regions = regions
		}
	}
	return out
}

// mustAnswer checks that r answers with exactly want.
func mustAnswer(t *testing.T, what string, r *mdns.Msg, want ...string) {
	t.Helper()
	got := addrs(r)
	if r.Rcode != mdns.RcodeSuccess || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: rcode %s answer %v, want NOERROR %v", what, mdns.RcodeToString[r.Rcode], got, want)
	}
}
