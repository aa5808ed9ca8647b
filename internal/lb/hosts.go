package lb

import (
	"fmt"
	"net/http"
	"time"

	"herd.dev/herd/internal/h1"
)

// Host routing: a listener with Routes is a host router, as a cloud load balancer's host-based
// rules are. It has no targets of its own: each request goes to the listener its Host header
// names (HostRoute), and is served there as if it had come to that listener's own socket, with
// its groups, health, retries, holding, draining, allowFrom and statistics. herd gives each
// load balancer one such listener on port 80 for the fleets' discovery names, so that a workload
// calls http://api.herd.internal/ without knowing the fleet's port (docs/discovery.md).
//
// The Host is matched without its port (any port: the router serves one) and without a trailing
// dot, case-insensitively (RFC 9110 section 4.2.3: the host is case-insensitive). A Host no route
// names gets 404 with a body that says so, and names no route.

// HostRoute sends the requests of one Host to a listener.
type HostRoute struct {
	// Host is the name matched, e.g. "api.herd.internal": lower case, no port. Required, unique
	// in the listener.
	Host string `json:"host"`
	// Listener is the name of the listener that serves the requests: an HTTP listener of the
	// same config, with http1 targets, that is no host router. Required.
	Listener string `json:"listener"`
}

// maxHostKey bounds the Host names a router matches; longer ones (no DNS name is longer than 253
// bytes) match no route.
const maxHostKey = 255

// hostKey returns the name a Host header value is matched by: without a port, without a trailing
// dot, in lower case, written into buf; nil when it cannot name a route (too long).
func hostKey(host, buf []byte) []byte {
	if i := lastColon(host); i >= 0 && allDigits(host[i+1:]) {
		host = host[:i]
	}
	if n := len(host); n > 0 && host[n-1] == '.' {
		host = host[:n-1]
	}
	if len(host) > maxHostKey || len(host) > cap(buf) {
		return nil
	}
	out := buf[:len(host)]
	for i, c := range host {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// lastColon is the index of the colon before a port: the last one, unless it is inside an IPv6
// literal's brackets; -1 when there is none.
func lastColon(host []byte) int {
	for i := len(host) - 1; i >= 0; i-- {
		switch host[i] {
		case ':':
			return i
		case ']':
			return -1
		}
	}
	return -1
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// routed returns the listener a router's request for host goes to, and that listener's state;
// nil when no route names host.
func (st *listenerState) routed(host []byte) (*listener, *listenerState) {
	var buf [maxHostKey]byte
	key := hostKey(host, buf[:])
	if key == nil {
		return nil, nil
	}
	l := st.hosts[string(key)]
	if l == nil {
		return nil, nil
	}
	return l, l.state.Load()
}

// unknownHost answers 404 to a router's request whose Host no route names.
func (l *listener) unknownHost(x exchange, host []byte, start time.Time) {
	x.refuse(http.StatusNotFound, 0, fmt.Sprintf("no fleet answers to host %q on this load balancer: call NAME.<discovery zone> of a fleet published with spec.discovery (herd get routes lists the names)\n", host))
	l.stats.observe(Class4xx, time.Since(start))
}

// validateRoutes checks a host router's own fields; Config.validateRoutes checks what its routes
// name.
func (l Listener) validateRoutes(bad func(field, format string, args ...any)) {
	if len(l.Routes) == 0 {
		return
	}
	if l.Protocol != ProtocolHTTP || l.BackendProtocol != BackendHTTP1 {
		bad("routes", "only an HTTP listener with http1 targets routes by host")
	}
	if len(l.Groups) > 0 || l.Tenancy != nil || len(l.AllowFrom) > 0 {
		bad("routes", "a host router has no groups, tenancy or allowFrom of its own: the listeners its routes name have them")
	}
	hosts := map[string]int{}
	for i, r := range l.Routes {
		p := fmt.Sprintf("routes[%d]", i)
		var buf [maxHostKey]byte
		if key := hostKey([]byte(r.Host), buf[:]); r.Host == "" || string(key) != r.Host || !h1.ValidHost([]byte(r.Host)) {
			bad(p+".host", "%q is not a host name in lower case without a port, such as \"api.herd.internal\"", r.Host)
		}
		if j, dup := hosts[r.Host]; dup {
			bad(p+".host", "%q is also the host of routes[%d]", r.Host, j)
		}
		hosts[r.Host] = i
		if r.Listener == "" {
			bad(p+".listener", "required")
		}
	}
}

// validateRoutes checks that every route names a listener of c that can serve it.
func (c Config) validateRoutes() []error {
	byName := map[string]Listener{}
	for _, l := range c.Listeners {
		byName[l.Name] = l
	}
	var errs []error
	for i, l := range c.Listeners {
		for j, r := range l.Routes {
			if r.Listener == "" {
				continue
			}
			p := fmt.Sprintf("listeners[%d].routes[%d].listener", i, j)
			t, ok := byName[r.Listener]
			switch {
			case !ok:
				errs = append(errs, fmt.Errorf("%s: no listener is named %q", p, r.Listener))
			case len(t.Routes) > 0:
				errs = append(errs, fmt.Errorf("%s: %q is a host router itself", p, r.Listener))
			case t.Protocol != ProtocolHTTP || t.BackendProtocol != BackendHTTP1:
				errs = append(errs, fmt.Errorf("%s: %q is not an HTTP listener with http1 targets", p, r.Listener))
			}
		}
	}
	return errs
}

// bindRoutes gives each host router of cfg its routes to the listeners, once they are all built.
// Called by Apply with lb.mu held.
func bindRoutes(cfg Config, listeners map[string]*listener, states map[string]*listenerState) {
	for _, lc := range cfg.Listeners {
		if len(lc.Routes) == 0 {
			continue
		}
		st := states[lc.Name]
		st.hosts = make(map[string]*listener, len(lc.Routes))
		for _, r := range lc.Routes {
			st.hosts[r.Host] = listeners[r.Listener]
		}
	}
}
