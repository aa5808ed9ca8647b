package dns

import (
	"net/netip"
	"slices"
	"strings"
	"time"

	mdns "github.com/miekg/dns"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/routes"
)

// snapshot is everything the packet path reads, built once per routes.Table and never changed
// afterwards, so queries read it without a lock. Answers are built here, not per query: a query
// only picks one of the prepared RRsets.
type snapshot struct {
	zone  string // lower case, fully qualified
	soa   []mdns.RR
	ns    []mdns.RR
	glue  map[string]*host // the name servers' own names in the zone
	hosts map[string]*host // fully qualified lower-case hostname -> answers
	// ents are the empty non-terminals: names in the zone with no records of their own but names
	// below them (NODATA, not NXDOMAIN, per RFC 8020).
	ents map[string]bool
	rtt  map[netip.Prefix]map[string]time.Duration
	// discovery is set on a discovery zone's server: the hosts are the published fleets, answered
	// by who asks (callers).
	discovery bool
	callers   map[netip.Addr]routes.FleetRegion
}

// host is one hostname's answers.
type host struct {
	route *routes.Route
	// regions are the eligible regions (indexes into route.Regions), in failover order.
	regions  []int
	failOpen bool
	// a and aaaa are each eligible region's RRsets, in the order of regions; allA and allAAAA
	// are every eligible region's together (the fail-open answer).
	a, aaaa       [][]mdns.RR
	allA, allAAAA []mdns.RR
	// cumulative weights over regions, for policy weighted; total 0 means equal weights.
	cumWeight []uint64
	total     uint64
}

// answerSet names the regions a hostname answers with, for telling changes apart.
func (h *host) answerSet() []string {
	out := make([]string, len(h.regions))
	for i, idx := range h.regions {
		out[i] = h.route.Regions[idx].Name
	}
	return out
}

func compile(zone string, nameservers []Nameserver, t routes.Table, serial uint32, discovery bool) *snapshot {
	s := &snapshot{
		zone: zone, hosts: map[string]*host{}, ents: map[string]bool{}, glue: map[string]*host{},
		rtt: t.RTT, discovery: discovery, callers: t.Callers,
	}
	mname := zone
	if len(nameservers) > 0 {
		mname = nameservers[0].Name
	}
	s.soa = []mdns.RR{&mdns.SOA{
		Hdr: mdns.RR_Header{Name: zone, Rrtype: mdns.TypeSOA, Class: mdns.ClassINET, Ttl: soaTTL},
		Ns:  mname, Mbox: "hostmaster." + zone, Serial: serial,
		Refresh: 60, Retry: 10, Expire: 3600, Minttl: negativeTTL,
	}}
	for _, n := range nameservers {
		s.ns = append(s.ns, &mdns.NS{Hdr: mdns.RR_Header{Name: zone, Rrtype: mdns.TypeNS, Class: mdns.ClassINET, Ttl: nsTTL}, Ns: n.Name})
		if mdns.IsSubDomain(zone, n.Name) && len(n.Addresses) > 0 {
			r := &routes.Route{Hostname: n.Name, Policy: v1alpha1.PolicyFailover,
				Regions: []routes.RegionRoute{{Name: "nameserver", Addresses: n.Addresses, Healthy: true}}}
			s.glue[n.Name] = compileHost(n.Name, r, nsTTL)
			s.addENTs(n.Name)
		}
	}
	hostRoutes := t.Routes
	if discovery {
		hostRoutes = t.Discovery
	}
	for i := range hostRoutes {
		r := &hostRoutes[i]
		name := mdns.Fqdn(strings.ToLower(r.Hostname))
		if discovery {
			name = strings.ToLower(r.Hostname) + "." + zone
		}
		if !mdns.IsSubDomain(zone, name) || name == zone {
			continue // outside the zone this server serves: another server's
		}
		if _, dup := s.hosts[name]; dup {
			continue // routes are sorted; the API refuses two fleets with one hostname
		}
		s.hosts[name] = compileHost(name, r, r.TTLSeconds)
		s.addENTs(name)
	}
	return s
}

// addENTs records every name between name and the zone apex as an empty non-terminal.
func (s *snapshot) addENTs(name string) {
	for off, end := mdns.NextLabel(name, 0); !end; off, end = mdns.NextLabel(name, off) {
		parent := name[off:]
		if parent == s.zone || !mdns.IsSubDomain(s.zone, parent) {
			break
		}
		s.ents[parent] = true
	}
}

func compileHost(name string, r *routes.Route, ttl uint32) *host {
	h := &host{route: r}
	h.regions, h.failOpen = r.Eligible()
	for _, idx := range h.regions {
		rg := r.Regions[idx]
		var a, aaaa []mdns.RR
		for _, addr := range rg.Addresses {
			addr = addr.Unmap()
			hdr := mdns.RR_Header{Name: name, Class: mdns.ClassINET, Ttl: ttl}
			if addr.Is4() {
				hdr.Rrtype = mdns.TypeA
				a = append(a, &mdns.A{Hdr: hdr, A: addr.AsSlice()})
			} else {
				hdr.Rrtype = mdns.TypeAAAA
				aaaa = append(aaaa, &mdns.AAAA{Hdr: hdr, AAAA: addr.AsSlice()})
			}
		}
		h.a = append(h.a, a)
		h.aaaa = append(h.aaaa, aaaa)
		h.allA = append(h.allA, a...)
		h.allAAAA = append(h.allAAAA, aaaa...)
		h.total += uint64(max(rg.Weight, 0))
		h.cumWeight = append(h.cumWeight, h.total)
	}
	return h
}

// answerChanges compares the regions each hostname answers with in old and new, and returns one
// change per region that left or joined, and per hostname that started or stopped failing open.
func answerChanges(old, new *snapshot) []change {
	var out []change
	names := make([]string, 0, len(new.hosts))
	for name := range new.hosts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := new.hosts[name]
		var before []string
		oldFailOpen := false
		if old != nil {
			if oh := old.hosts[name]; oh != nil {
				before, oldFailOpen = oh.answerSet(), oh.failOpen
			}
		}
		after := h.answerSet()
		for _, idx := range h.regions {
			rg := h.route.Regions[idx]
			if !slices.Contains(before, rg.Name) {
				out = append(out, change{fleet: h.route.Fleet, host: name, region: rg.Name, joined: true, why: rg.Why})
			}
		}
		for _, rg := range h.route.Regions {
			if slices.Contains(before, rg.Name) && !slices.Contains(after, rg.Name) {
				out = append(out, change{fleet: h.route.Fleet, host: name, region: rg.Name, why: rg.Why})
			}
		}
		if h.failOpen != oldFailOpen {
			out = append(out, change{fleet: h.route.Fleet, host: name, failOpen: h.failOpen, failOpenChanged: true})
		}
	}
	if old != nil {
		var gone []string
		for name := range old.hosts {
			if new.hosts[name] == nil {
				gone = append(gone, name)
			}
		}
		slices.Sort(gone)
		for _, name := range gone {
			out = append(out, change{fleet: old.hosts[name].route.Fleet, host: name, removed: true})
		}
	}
	return out
}

// change is one region leaving or joining a hostname's answers, a hostname starting or stopping
// to fail open, or a hostname leaving the zone.
type change struct {
	fleet, host, region, why string
	joined                   bool
	failOpen                 bool
	failOpenChanged          bool
	removed                  bool
}
