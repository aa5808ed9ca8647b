package dns

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"herd.dev/herd/internal/global/routes"
)

// TestWeightedSpread asks for w.herd.test (eu 3, us 1, ap 0) from 10,000 distinct /24 subnets,
// over UDP with EDNS Client Subnet: each region's share is within 2 points of its weight, and a
// subnet asking again gets the same region.
func TestWeightedSpread(t *testing.T) {
	_, addr := startServer(t, testTable(), nil)
	c := &mdns.Client{Net: "udp", Timeout: 2 * time.Second}
	conn, err := c.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	const n = 10000
	count := map[string]int{}
	first := map[int]string{}
	for i := range n {
		subnet := fmt.Sprintf("%d.%d.%d.0/24", 11+i/65536, (i/256)%256, i%256)
		m := new(mdns.Msg).SetQuestion("w.herd.test.", mdns.TypeA)
		ecs(subnet)(m)
		r, _, err := c.ExchangeWithConn(m, conn)
		if err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
		got := addrs(r)
		if len(got) != 1 {
			t.Fatalf("%s: answer %v, want one region", subnet, got)
		}
		if e := replyECS(r); e == nil || e.SourceScope != 24 || e.SourceNetmask != 24 {
			t.Fatalf("%s: ECS echo %v, want source 24 scope 24", subnet, e)
		}
		count[got[0]]++
		if i < 100 {
			first[i] = got[0]
		}
	}
	want := map[string]float64{euAddr.String(): 0.75, usAddr.String(): 0.25, apAddr.String(): 0}
	for a, share := range want {
		got := float64(count[a]) / n
		t.Logf("%s: %.2f%% of subnets (weight share %.0f%%)", a, 100*got, 100*share)
		if math.Abs(got-share) > 0.02 {
			t.Errorf("%s got %.2f%% of subnets, want %.0f%% +- 2", a, 100*got, 100*share)
		}
	}
	for i, a := range first {
		m := new(mdns.Msg).SetQuestion("w.herd.test.", mdns.TypeA)
		ecs(fmt.Sprintf("%d.%d.%d.77/32", 11+i/65536, (i/256)%256, i%256))(m) // another host, same /24
		r, _, err := c.ExchangeWithConn(m, conn)
		if err != nil {
			t.Fatal(err)
		}
		if got := addrs(r); len(got) != 1 || got[0] != a {
			t.Errorf("subnet %d bounced from %s to %v", i, a, got)
		}
	}
}

func TestGeo(t *testing.T) {
	table := testTable()
	for i := range table.Routes {
		if table.Routes[i].Hostname == "geo.herd.test" {
			table.Routes[i].Geo = append(table.Routes[i].Geo, routes.GeoRule{Prefix: netip.MustParsePrefix("127.0.0.7/32"), Region: "us"})
			routes.SortGeo(table.Routes[i].Geo)
		}
	}
	_, addr := startServer(t, table, nil)
	cases := []struct {
		ecs   string
		want  string
		scope uint8
	}{
		{"10.1.2.0/24", usAddr.String(), 24},
		{"10.1.7.0/24", apAddr.String(), 24}, // the longer prefix wins
		{"2001:db8:aa::/56", apAddr.String(), 56},
		{"192.0.2.0/24", euAddr.String(), 24}, // no match: the default
	}
	for _, c := range cases {
		r := query(t, "udp", addr, "geo.herd.test.", mdns.TypeA, ecs(c.ecs))
		mustAnswer(t, "geo from "+c.ecs, r, c.want)
		if e := replyECS(r); e == nil || e.SourceScope != c.scope {
			t.Errorf("geo from %s: ECS echo %v, want scope %d", c.ecs, e, c.scope)
		}
	}
	// Without ECS, the resolver's own address decides.
	mustAnswer(t, "geo from 127.0.0.1", query(t, "udp", addr, "geo.herd.test.", mdns.TypeA), euAddr.String())
	c := &mdns.Client{Net: "udp", Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP("127.0.0.7")}}}
	r, _, err := c.Exchange(new(mdns.Msg).SetQuestion("geo.herd.test.", mdns.TypeA), addr)
	if err != nil {
		t.Fatal(err)
	}
	mustAnswer(t, "geo from resolver 127.0.0.7", r, usAddr.String())

	// A malformed ECS option (source prefix longer than the address) is FORMERR (RFC 7871).
	r = query(t, "udp", addr, "geo.herd.test.", mdns.TypeA, func(m *mdns.Msg) {
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = []mdns.EDNS0{&mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, SourceScope: 8, Address: net.IPv4(10, 1, 2, 0)}}
	})
	if r.Rcode != mdns.RcodeFormatError {
		t.Errorf("ECS with a scope in the query: %s, want FORMERR", mdns.RcodeToString[r.Rcode])
	}
}

func TestLatency(t *testing.T) {
	s, addr := startServer(t, testTable(), nil)
	// 10.5.5.0/24 measured us fastest; 10.6.6.0/24 measured eu fastest.
	mustAnswer(t, "lat from 10.5.5.0/24", query(t, "udp", addr, "lat.herd.test.", mdns.TypeA, ecs("10.5.5.9/32")), usAddr.String())
	mustAnswer(t, "lat from 10.6.6.0/24", query(t, "udp", addr, "lat.herd.test.", mdns.TypeA, ecs("10.6.6.0/24")), euAddr.String())
	// Unknown network: the geo fallback (10.1.0.0/16 is us, else eu).
	mustAnswer(t, "lat from unmeasured 10.1.9.0/24", query(t, "udp", addr, "lat.herd.test.", mdns.TypeA, ecs("10.1.9.0/24")), usAddr.String())
	mustAnswer(t, "lat from unmeasured 192.0.2.0/24", query(t, "udp", addr, "lat.herd.test.", mdns.TypeA, ecs("192.0.2.0/24")), euAddr.String())
	// The fastest region fails: the next fastest answers.
	s.Update(withRegions(testTable(), "lat.herd.test", region("eu", true, euAddr), region("us", false, usAddr), region("ap", true, apAddr)))
	mustAnswer(t, "lat from 10.5.5.0/24 with us down", query(t, "udp", addr, "lat.herd.test.", mdns.TypeA, ecs("10.5.5.0/24")), euAddr.String())
}
