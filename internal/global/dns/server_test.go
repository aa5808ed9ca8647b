package dns

import (
	"slices"
	"strings"
	"testing"

	mdns "github.com/miekg/dns"

	"herd.dev/herd/internal/events/eventstest"
	"herd.dev/herd/internal/global/routes"
)

func TestFailoverAndEvents(t *testing.T) {
	ev := &eventstest.Recorder{}
	s, addr := startServer(t, testTable(), ev)
	for _, network := range []string{"udp", "tcp"} {
		mustAnswer(t, network+" fo A", query(t, network, addr, "fo.herd.test.", mdns.TypeA), euAddr.String())
		mustAnswer(t, network+" fo AAAA", query(t, network, addr, "FO.Herd.Test.", mdns.TypeAAAA), euAddr6.String())
	}
	r := query(t, "udp", addr, "fo.herd.test.", mdns.TypeA)
	if !r.Authoritative || r.Answer[0].Header().Ttl != 5 {
		t.Errorf("answer aa=%v ttl=%d, want authoritative with the route's TTL 5", r.Authoritative, r.Answer[0].Header().Ttl)
	}

	// eu fails: us takes over, and the change is an event on the fleet.
	s.Update(withRegions(testTable(), "fo.herd.test", region("eu", false, euAddr, euAddr6), region("us", true, usAddr), region("ap", true, apAddr)))
	mustAnswer(t, "fo A after eu failed", query(t, "udp", addr, "fo.herd.test.", mdns.TypeA), usAddr.String())
	r = query(t, "udp", addr, "fo.herd.test.", mdns.TypeAAAA)
	if r.Rcode != mdns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 1 || r.Ns[0].Header().Rrtype != mdns.TypeSOA {
		t.Errorf("fo AAAA with us (IPv4 only) answering: %v, want NODATA with the SOA", r)
	}
	got := eventLines(ev)
	if !slices.ContainsFunc(got, func(e string) bool {
		return strings.HasPrefix(e, "Fleet/fo Warning DNSRegionOut: region eu left the DNS answers for fo.herd.test.: unreachable")
	}) {
		t.Errorf("events %q: want eu leaving fo.herd.test", got)
	}

	// eu returns.
	s.Update(testTable())
	mustAnswer(t, "fo A after eu returned", query(t, "udp", addr, "fo.herd.test.", mdns.TypeA), euAddr.String())
	if !slices.ContainsFunc(eventLines(ev), func(e string) bool { return strings.HasPrefix(e, "Fleet/fo Normal DNSRegionIn: region eu") }) {
		t.Errorf("events %q: want eu joining fo.herd.test", eventLines(ev))
	}

	// The fleet goes (or its spec.global): the hostname leaves the zone, and says so.
	without := testTable()
	without.Routes = slices.DeleteFunc(without.Routes, func(r routes.Route) bool { return r.Hostname == "fo.herd.test" })
	s.Update(without)
	if r := query(t, "udp", addr, "fo.herd.test.", mdns.TypeA); r.Rcode != mdns.RcodeNameError {
		t.Errorf("fo A after its fleet left: %v, want NXDOMAIN", r)
	}
	if !slices.ContainsFunc(eventLines(ev), func(e string) bool {
		return strings.HasPrefix(e, "Fleet/fo Normal DNSHostnameRemoved: fo.herd.test. left the zone")
	}) {
		t.Errorf("events %q: want fo.herd.test leaving the zone", eventLines(ev))
	}
}

func TestFailOpen(t *testing.T) {
	ev := &eventstest.Recorder{}
	s, addr := startServer(t, testTable(), ev)
	s.Update(withRegions(testTable(), "w.herd.test", region("eu", false, euAddr), region("us", false, usAddr), region("ap", false)))
	r := query(t, "udp", addr, "w.herd.test.", mdns.TypeA, ecs("10.44.0.0/24"))
	mustAnswer(t, "w A with no healthy region", r, euAddr.String(), usAddr.String())
	if e := replyECS(r); e == nil || e.SourceScope != 0 {
		t.Errorf("fail-open ECS echo %v, want scope 0 (the answer is the same for everyone)", e)
	}
	if !slices.ContainsFunc(eventLines(ev), func(e string) bool { return strings.HasPrefix(e, "Fleet/w Warning DNSFailOpen:") }) {
		t.Errorf("events %q: want a DNSFailOpen warning", eventLines(ev))
	}
	s.Update(testTable())
	if !slices.ContainsFunc(eventLines(ev), func(e string) bool { return strings.HasPrefix(e, "Fleet/w Normal DNSFailOpenEnded:") }) {
		t.Errorf("events %q: want DNSFailOpenEnded", eventLines(ev))
	}
}

func TestZoneRecords(t *testing.T) {
	_, addr := startServer(t, testTable(), nil)
	r := query(t, "udp", addr, "herd.test.", mdns.TypeSOA)
	if len(r.Answer) != 1 || r.Answer[0].(*mdns.SOA).Ns != "ns1.herd.test." || !r.Authoritative {
		t.Errorf("SOA: %v", r)
	}
	r = query(t, "udp", addr, "herd.test.", mdns.TypeNS)
	if len(r.Answer) != 1 || r.Answer[0].(*mdns.NS).Ns != "ns1.herd.test." || len(r.Extra) != 1 || r.Extra[0].(*mdns.A).A.String() != nsAddr.String() {
		t.Errorf("NS: %v, want ns1.herd.test. with its glue", r)
	}
	mustAnswer(t, "ns1 A", query(t, "udp", addr, "ns1.herd.test.", mdns.TypeA), nsAddr.String())

	cases := []struct {
		name  string
		qtype uint16
		rcode int
		soa   bool // the SOA in the authority section (negative answers)
	}{
		{"nope.herd.test.", mdns.TypeA, mdns.RcodeNameError, true},
		{"x.fo.herd.test.", mdns.TypeA, mdns.RcodeNameError, true},
		{"fo.herd.test.", mdns.TypeTXT, mdns.RcodeSuccess, true},
		{"fo.herd.test.", mdns.TypeMX, mdns.RcodeSuccess, true},
		{"app.herd.test.", mdns.TypeA, mdns.RcodeSuccess, true}, // empty non-terminal: NODATA
		{"herd.test.", mdns.TypeA, mdns.RcodeSuccess, true},
		{"example.com.", mdns.TypeA, mdns.RcodeRefused, false},
		{"test.", mdns.TypeSOA, mdns.RcodeRefused, false},
		{"xherd.test.", mdns.TypeA, mdns.RcodeRefused, false},
	}
	for _, c := range cases {
		r := query(t, "udp", addr, c.name, c.qtype)
		hasSOA := len(r.Ns) == 1 && r.Ns[0].Header().Rrtype == mdns.TypeSOA
		if r.Rcode != c.rcode || len(r.Answer) != 0 || hasSOA != c.soa {
			t.Errorf("%s %s: rcode %s answers %d soa %v, want %s soa %v", c.name, mdns.TypeToString[c.qtype],
				mdns.RcodeToString[r.Rcode], len(r.Answer), hasSOA, mdns.RcodeToString[c.rcode], c.soa)
		}
	}
	if r := query(t, "udp", addr, "nope.herd.test.", mdns.TypeA); r.Ns[0].(*mdns.SOA).Minttl != negativeTTL {
		t.Errorf("negative TTL %d, want %d", r.Ns[0].(*mdns.SOA).Minttl, negativeTTL)
	}

	// ANY: one RRset, not everything (RFC 8482).
	mustAnswer(t, "fo ANY", query(t, "tcp", addr, "fo.herd.test.", mdns.TypeANY), euAddr.String())
	if r := query(t, "udp", addr, "herd.test.", mdns.TypeANY); len(r.Answer) != 1 || r.Answer[0].Header().Rrtype != mdns.TypeSOA {
		t.Errorf("apex ANY: %v, want the SOA alone", r.Answer)
	}
	// Not a query: NOTIMP. Another class: REFUSED.
	r = query(t, "udp", addr, "fo.herd.test.", mdns.TypeA, func(m *mdns.Msg) { m.Opcode = mdns.OpcodeNotify })
	if r.Rcode != mdns.RcodeNotImplemented {
		t.Errorf("NOTIFY: %s, want NOTIMP", mdns.RcodeToString[r.Rcode])
	}
	r = query(t, "udp", addr, "version.bind.", mdns.TypeTXT, func(m *mdns.Msg) { m.Question[0].Qclass = mdns.ClassCHAOS })
	if r.Rcode != mdns.RcodeRefused {
		t.Errorf("CHAOS version.bind: %s, want REFUSED", mdns.RcodeToString[r.Rcode])
	}
}

func TestEDNSAndTruncation(t *testing.T) {
	_, addr := startServer(t, testTable(), nil)
	r := query(t, "udp", addr, "fo.herd.test.", mdns.TypeA, edns(65000))
	if o := r.IsEdns0(); o == nil || o.UDPSize() != DefaultMaxUDPSize {
		t.Errorf("reply OPT %v, want one advertising %d", o, DefaultMaxUDPSize)
	}
	if r := query(t, "udp", addr, "fo.herd.test.", mdns.TypeA); r.IsEdns0() != nil {
		t.Errorf("reply to a query without EDNS has an OPT record")
	}
	r = query(t, "udp", addr, "fo.herd.test.", mdns.TypeA, func(m *mdns.Msg) { m.SetEdns0(4096, false); m.IsEdns0().SetVersion(1) })
	if r.Rcode != mdns.RcodeBadVers {
		t.Errorf("EDNS version 1: %s, want BADVERS", mdns.RcodeToString[r.Rcode])
	}

	// 100 addresses: about 1.6 kB. Over UDP without EDNS (512) and with a huge buffer (capped to
	// 1232) the answer is truncated; over TCP it is whole.
	for _, opts := range [][]func(*mdns.Msg){nil, {edns(65000)}, {edns(1500)}} {
		r := query(t, "udp", addr, "big.herd.test.", mdns.TypeA, opts...)
		limit := mdns.MinMsgSize
		if len(opts) > 0 {
			limit = DefaultMaxUDPSize
		}
		r.Compress = true // as it came over the wire
		packed, _ := r.Pack()
		if !r.Truncated || len(r.Answer) >= 100 || len(packed) > limit {
			t.Errorf("big over UDP (%d opts): tc=%v answers=%d size=%d, want truncated within %d", len(opts), r.Truncated, len(r.Answer), len(packed), limit)
		}
	}
	r = query(t, "tcp", addr, "big.herd.test.", mdns.TypeA, edns(1232))
	if r.Truncated || len(r.Answer) != 100 {
		t.Errorf("big over TCP: tc=%v answers=%d, want all 100", r.Truncated, len(r.Answer))
	}
	// A client that retries over TCP on TC gets everything: miekg's client does not, so do it here
	// the way resolvers do.
	c := &mdns.Client{Net: "udp"}
	m := new(mdns.Msg).SetQuestion("big.herd.test.", mdns.TypeA)
	r, _, err := c.Exchange(m, addr)
	if err != nil || !r.Truncated {
		t.Fatalf("udp: %v %v", r, err)
	}
	c.Net = "tcp"
	if r, _, err = c.Exchange(m, addr); err != nil || len(r.Answer) != 100 {
		t.Fatalf("tcp retry: %d answers, %v", len(r.Answer), err)
	}
}
