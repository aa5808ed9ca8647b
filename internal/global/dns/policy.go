package dns

import (
	"net/netip"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/fnvmix"
)

// client is who a query is answered for: the EDNS Client Subnet when the resolver sent one, else
// the resolver's own address.
type client struct {
	addr netip.Addr
	// bits is how much of addr is known: the ECS source prefix length, or the full address.
	bits int
}

// network is the client's /24 (/48 for IPv6), or its ECS prefix when that is shorter: the unit in
// which clients are kept on one region and round-trip times are measured.
func (c client) network() netip.Prefix {
	bits := 24
	if c.addr.Is6() {
		bits = 48
	}
	p, _ := c.addr.Prefix(min(bits, c.bits))
	return p
}

// pick returns the index into h.regions of the region that answers c, or -1 when every eligible
// region answers (fail open), and the ECS scope prefix length the answer holds for.
func (h *host) pick(s *snapshot, c client) (int, int) {
	if h.failOpen || len(h.regions) == 0 {
		return -1, 0
	}
	if s.discovery {
		return h.callersRegion(s, c), 0
	}
	switch h.route.Policy {
	case v1alpha1.PolicyWeighted:
		return h.weighted(c), c.network().Bits()
	case v1alpha1.PolicyGeo:
		return h.geo(c)
	case v1alpha1.PolicyLatency:
		if i, ok := h.latency(s, c); ok {
			return i, c.network().Bits()
		}
		if h.route.LatencyFallback == v1alpha1.PolicyGeo {
			return h.geo(c)
		}
		return h.weighted(c), c.network().Bits()
	default: // failover: the same answer for every client
		return 0, 0
	}
}

// weighted picks a region by weight from a hash of the client's network, so that one network
// always lands on the same region while the regions stay the same, and many networks spread as
// the weights say.
func (h *host) weighted(c client) int {
	if h.total == 0 { // every eligible region weighs 0: share equally rather than answer nothing
		return int(hashNetwork(c.network()) % uint64(len(h.regions)))
	}
	x := hashNetwork(c.network()) % h.total
	for i, cum := range h.cumWeight {
		if x < cum {
			return i
		}
	}
	return len(h.regions) - 1
}

// geo picks the region of the longest CIDR holding the client, else the default; a region that is
// not eligible gives way to the first eligible one in failover order.
func (h *host) geo(c client) (int, int) {
	region, scope := h.route.GeoDefault, c.bits
	for _, rule := range h.route.Geo {
		if rule.Prefix.Contains(c.addr) {
			region = rule.Region
			break
		}
	}
	if i := h.indexOf(region); i >= 0 {
		return i, scope
	}
	return 0, scope
}

// latency picks the eligible region of the lowest round-trip time measured from the client's
// network; ok is false when no eligible region has been measured from it.
func (h *host) latency(s *snapshot, c client) (int, bool) {
	byRegion := s.rtt[c.network()]
	if len(byRegion) == 0 {
		return 0, false
	}
	best, found := 0, false
	for i, idx := range h.regions {
		rtt, ok := byRegion[h.route.Regions[idx].Name]
		if ok && (!found || rtt < byRegion[h.route.Regions[h.regions[best]].Name]) {
			best, found = i, true
		}
	}
	return best, found
}

func (h *host) indexOf(region string) int {
	for i, idx := range h.regions {
		if h.route.Regions[idx].Name == region {
			return i
		}
	}
	return -1
}

// hashNetwork hashes the prefix's address and length (fnvmix), so that neighbouring networks spread
// evenly. It is fixed, not seeded per process, so that every herd DNS server sends a network to the
// same region.
func hashNetwork(p netip.Prefix) uint64 {
	var b [17]byte
	a := p.Addr().As16()
	copy(b[:], a[:])
	b[16] = byte(p.Bits())
	return fnvmix.Mix64(fnvmix.FNV1a(b[:]))
}
