package dns

// Discovery: a server with Options.Discovery answers NAME.<zone> for the fleets published with
// spec.discovery, to the instances of other fleets, which it tells by the query's source address
// (routes.Table.Callers): an instance's CoreDNS forwards the zone here, and its queries leave
// from the instance's address.
//
// A fleet whose allowFrom leaves the caller's fleet out gets NXDOMAIN, as for a name that does not
// exist, rather than REFUSED: the name must not resolve for it, and NXDOMAIN is the answer every
// stub resolver takes as final ("no such host" from Go, glibc and musl, cached negatively by
// CoreDNS), while REFUSED reads as a broken server (glibc and Go's resolver try the next server
// and report a temporary failure, CoreDNS's forward does not cache it, so the instance would ask
// again on every call). NXDOMAIN also says nothing of whether the fleet exists.

// allowed reports whether the client may have h's answers: always on a global zone; on a
// discovery zone when the route has no allowFrom, or names the fleet of the instance asking.
func (s *snapshot) allowed(h *host, c client) bool {
	if !s.discovery || len(h.route.AllowFrom) == 0 {
		return true
	}
	caller, ok := s.callers[c.addr]
	if !ok || c.bits != c.addr.BitLen() {
		return false // not an instance: no fleet to allow
	}
	for _, f := range h.route.AllowFrom {
		if f == caller.Fleet {
			return true
		}
	}
	return false
}

// callersRegion picks the caller's own region when it is eligible (it has a Ready instance of the
// fleet), else the first eligible region in the order of spec.regions: a call stays in its
// region unless the region cannot serve it.
func (h *host) callersRegion(s *snapshot, c client) int {
	if caller, ok := s.callers[c.addr]; ok && c.bits == c.addr.BitLen() {
		if i := h.indexOf(caller.Region); i >= 0 {
			return i
		}
	}
	return 0
}
