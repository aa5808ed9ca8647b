package lb

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Callers: a listener with AllowFrom (a fleet's spec.discovery.allowFrom) serves the instances of
// the fleets it names and no other fleet's. The load balancer tells a request's fleet by its source
// address (Config.Callers): the instances of fleets call each other through their region's load
// balancer from their own addresses. A request from an instance of a fleet left out gets 403 with a
// body naming its fleet and the field, or on a TCP listener its connection is closed; a client
// that is no instance (a user, the front door, a probe) is served, since the listener serves its
// fleet's users too.
//
// The check costs a nil test on a listener without AllowFrom, and one map lookup of the client's
// address with it: Apply builds each such listener's map of the addresses it refuses.

// refusedCallers are the callers lc refuses, with their fleet; nil when it refuses none.
func refusedCallers(lc Listener, callers map[netip.Addr]string) map[netip.Addr]string {
	if len(lc.AllowFrom) == 0 {
		return nil
	}
	var out map[netip.Addr]string
	for addr, fleet := range callers {
		if slices.Contains(lc.AllowFrom, fleet) {
			continue
		}
		if out == nil {
			out = map[netip.Addr]string{}
		}
		out[addr.Unmap()] = fleet
	}
	return out
}

// admitCaller answers 403 to a request from an instance of a fleet st's listener does not take,
// and reports whether the request may go on.
func (l *listener) admitCaller(st *listenerState, x exchange, start time.Time) bool {
	fleet, refused := st.refused[x.client()]
	if !refused {
		return true
	}
	x.refuse(http.StatusForbidden, 0, fmt.Sprintf("fleet %s takes calls only from the fleets in its spec.discovery.allowFrom (%s), and this request came from an instance of fleet %s\n",
		st.cfg.Fleet, strings.Join(st.cfg.AllowFrom, ", "), fleet))
	l.stats.observe(Class4xx, time.Since(start))
	return false
}

// refusesConn reports whether a TCP listener refuses the client connection c.
func (st *listenerState) refusesConn(c net.Conn) bool {
	if st.refused == nil {
		return false
	}
	_, refused := st.refused[connAddr(c)]
	return refused
}

// connAddr is the address a client connection comes from.
func connAddr(c net.Conn) netip.Addr {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap()
	}
	ap, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	return ap.Addr().Unmap()
}
