package lb

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Tenancy is on a listener whose fleet gives every tenant instances of its own: a request goes only
// to the targets of the tenant its key names (Target.Tenant), never to another tenant's, whatever
// the weights, health or retries. A known tenant with no usable target is claimed (the claimer
// given with SetTenantClaimer is told, so that an instance is assigned to it) and its request is
// held (Listener.Hold) until one serves; an unknown tenant gets 404 unless Open.
type Tenancy struct {
	// Key is where a request names its tenant: header (Header's value), host (the Host header's
	// first label) or pathPrefix (the path's first segment). Required.
	Key TenantKey `json:"key"`
	// Header is the request header of key header. Required with it.
	Header string `json:"header,omitempty"`
	// Tenants are the tenants known besides those that have targets.
	Tenants []string `json:"tenants,omitempty"`
	// Open accepts any tenant: an unknown one is claimed like a known one. Default false: 404.
	Open bool `json:"open,omitempty"`
	// MaxInFlight bounds each tenant's requests in flight at once (held ones included), so that
	// one tenant's flood cannot take the load balancer from the others: a request over it waits
	// for one of its tenant's to finish, in arrival order, up to MaxWait, and is then answered
	// 429 with Retry-After (tenantlimit.go). Default 0: no bound.
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// RequestsPerSecond bounds each tenant's rate of requests (a token bucket holding a tenth of
	// a second's worth): a request over it waits for its turn, up to MaxWait, and is then
	// answered 429 with Retry-After. Waiting requests are let go in batches, up to 10 ms past
	// their turns (tenantpace.go). Default 0: no bound.
	RequestsPerSecond float64 `json:"requestsPerSecond,omitempty"`
	// MaxWait is how long a request over MaxInFlight or RequestsPerSecond waits for its turn.
	// Default 0: none, 429 at once.
	MaxWait Duration `json:"maxWait,omitempty"`
}

// TenantKey names where a request carries its tenant.
type TenantKey string

// Tenant keys.
const (
	TenantByHeader     TenantKey = "header"
	TenantByHost       TenantKey = "host"
	TenantByPathPrefix TenantKey = "pathPrefix"
)

func (t *Tenancy) validate(bad func(field, format string, args ...any), protocol Protocol) {
	if t == nil {
		return
	}
	if protocol != ProtocolHTTP {
		bad("tenancy", "only HTTP listeners route by tenant")
	}
	switch t.Key {
	case TenantByHeader:
		if t.Header == "" {
			bad("tenancy.header", "required with key header")
		}
	case TenantByHost, TenantByPathPrefix:
	default:
		bad("tenancy.key", "%q is not one of header, host, pathPrefix", t.Key)
	}
	if t.MaxInFlight < 0 {
		bad("tenancy.maxInFlight", "must be >= 0 (0: no bound)")
	}
	if t.RequestsPerSecond < 0 {
		bad("tenancy.requestsPerSecond", "must be >= 0 (0: no bound)")
	}
	if t.MaxWait < 0 {
		bad("tenancy.maxWait", "must be >= 0")
	}
}

// tenantRoutes is the routing of a tenancy listener: one routes per tenant, each over that
// tenant's targets only.
type tenantRoutes struct {
	key      TenantKey
	header   string // canonical, for the net/http engine
	open     bool
	byTenant map[string]*tenantRoute
}

type tenantRoute struct {
	routes *routes // nil while the tenant has no target
	stats  *tenantStats
}

// tenantStats is what the load balancer counts of one tenant, kept across Applies.
type tenantStats struct {
	requests atomic.Uint64
	last     atomic.Int64 // unix nanoseconds of its latest request
	limit    tenantLimit
}

// TenantStat is one tenant's figures (TenantStats).
type TenantStat struct {
	Fleet, Tenant string
	// Requests counts the requests routed to the tenant (held ones included) since herd up started.
	Requests uint64
	// LastRequest is when its latest request came; zero when none came.
	LastRequest time.Time
	// Queued counts the requests that waited for a slot of Tenancy.MaxInFlight; Limited those
	// answered 429 because none came free within Tenancy.MaxWait.
	Queued, Limited uint64
}

// tenantTable keeps every tenant's stats, by fleet and tenant, and the claimer.
type tenantTable struct {
	stats   sync.Map // fleet + "/" + tenant -> *tenantStats
	claimer atomic.Pointer[func(fleet, tenant string)]
}

func (tt *tenantTable) get(fleet, tenant string) *tenantStats {
	k := fleet + "/" + tenant
	if s, ok := tt.stats.Load(k); ok {
		return s.(*tenantStats)
	}
	s, _ := tt.stats.LoadOrStore(k, &tenantStats{})
	return s.(*tenantStats)
}

// SetTenantClaimer sets what is told of a request for a tenant that has no usable target: it must
// return at once (it runs on the request path) and may be told many times of one tenant. nil
// tells nobody (held requests then wait for a target that another claim brings).
func (lb *LB) SetTenantClaimer(claim func(fleet, tenant string)) {
	if claim == nil {
		lb.tenants.claimer.Store(nil)
		return
	}
	lb.tenants.claimer.Store(&claim)
}

// TenantStats returns the figures of every tenant of a fleet that has had a request or a target,
// sorted by tenant.
func (lb *LB) TenantStats(fleet string) []TenantStat {
	var out []TenantStat
	prefix := fleet + "/"
	lb.tenants.stats.Range(func(k, v any) bool {
		if tenant, ok := strings.CutPrefix(k.(string), prefix); ok {
			out = append(out, statOf(fleet, tenant, v.(*tenantStats)))
		}
		return true
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}

// TenantLastRequest returns when the latest request for a tenant of a fleet came; zero if none has.
func (lb *LB) TenantLastRequest(fleet, tenant string) time.Time {
	if s, ok := lb.tenants.stats.Load(fleet + "/" + tenant); ok {
		return statOf(fleet, tenant, s.(*tenantStats)).LastRequest
	}
	return time.Time{}
}

func statOf(fleet, tenant string, s *tenantStats) TenantStat {
	st := TenantStat{Fleet: fleet, Tenant: tenant, Requests: s.requests.Load(),
		Queued: s.limit.queued.Load(), Limited: s.limit.limited.Load()}
	if ns := s.last.Load(); ns > 0 {
		st.LastRequest = time.Unix(0, ns)
	}
	return st
}

// buildTenants splits a listener's groups into one routes per tenant. Targets without a tenant
// get no request. Called with lb.mu held.
func (lb *LB) buildTenants(lc Listener, groups []*group, byTarget map[*target]string) *tenantRoutes {
	tc := lc.Tenancy
	tr := &tenantRoutes{key: tc.Key, header: http.CanonicalHeaderKey(tc.Header), open: tc.Open, byTenant: map[string]*tenantRoute{}}
	entry := func(tenant string) *tenantRoute {
		e := tr.byTenant[tenant]
		if e == nil {
			e = &tenantRoute{stats: lb.tenants.get(lc.Fleet, tenant)}
			tr.byTenant[tenant] = e
		}
		return e
	}
	for _, name := range tc.Tenants {
		entry(name)
	}
	for _, g := range groups {
		split := map[string]*group{}
		var order []string
		for _, t := range g.targets {
			tenant := byTarget[t]
			if tenant == "" {
				continue
			}
			sg := split[tenant]
			if sg == nil {
				sg = &group{name: g.name, bal: g.bal}
				split[tenant] = sg
				order = append(order, tenant)
			}
			sg.targets = append(sg.targets, t)
		}
		for _, tenant := range order {
			e := entry(tenant)
			if e.routes == nil {
				e.routes = &routes{}
			}
			e.routes.groups = append(e.routes.groups, split[tenant])
		}
	}
	for _, e := range tr.byTenant {
		if e.routes == nil {
			continue
		}
		// Within a tenant, each revision carries a share in proportion to its targets.
		w := make([]int, len(e.routes.groups))
		for i, g := range e.routes.groups {
			w[i] = len(g.targets)
		}
		e.routes.sched = smoothSchedule(w)
	}
	return tr
}

// pickTenant picks among the targets of the tenant k names only; nil when it has none usable.
func (tr *tenantRoutes) pick(k *pickKey, exclude *target) *target {
	e := tr.byTenant[string(k.tenant)]
	if e == nil || e.routes == nil {
		return nil
	}
	return e.routes.pick(k, exclude)
}

// admitTenant counts a request of a tenancy listener for its tenant, or refuses it (404) when it
// names no tenant or one the listener does not know and does not accept, or (429) when its
// tenant has Tenancy.MaxInFlight requests in flight for longer than Tenancy.MaxWait. It reports
// whether the request may go on, and then returns what frees its place in the tenant's bound.
func (l *listener) admitTenant(ctx context.Context, st *listenerState, x exchange, k *pickKey, start time.Time) (release func(), ok bool) {
	tr := st.routes.tenants
	e := tr.byTenant[string(k.tenant)]
	switch {
	case len(k.tenant) == 0:
		x.refuse(http.StatusNotFound, 0, fmt.Sprintf("no tenant in the request: fleet %s routes by %s\n", st.cfg.Fleet, tr.describeKey()))
		l.stats.observe(Class4xx, time.Since(start))
		return nil, false
	case e == nil && !tr.open:
		x.refuse(http.StatusNotFound, 0, fmt.Sprintf("unknown tenant %q: fleet %s serves the tenants of its spec.tenancy.tenants (or any with open: true)\n", k.tenant, st.cfg.Fleet))
		l.stats.observe(Class4xx, time.Since(start))
		return nil, false
	}
	var s *tenantStats
	if e != nil {
		s = e.stats
	} else {
		s = l.lb.tenants.get(st.cfg.Fleet, string(k.tenant))
	}
	s.requests.Add(1)
	s.last.Store(start.UnixNano())
	return l.enterTenant(ctx, st, x, s, string(k.tenant), start)
}

// claim tells the claimer that the tenant of k has no usable target.
func (l *listener) claim(st *listenerState, k *pickKey) {
	if c := l.lb.tenants.claimer.Load(); c != nil {
		(*c)(st.cfg.Fleet, string(k.tenant))
	}
}

func (tr *tenantRoutes) describeKey() string {
	switch tr.key {
	case TenantByHeader:
		return "the " + tr.header + " header"
	case TenantByHost:
		return "the first label of the Host header"
	}
	return "the first segment of the path"
}

// tenantOf returns the tenant a request's Host or target names, for keys host and pathPrefix.
func tenantOf(key TenantKey, host, target []byte) []byte {
	switch key {
	case TenantByHost:
		if i := bytes.IndexAny(host, ".:"); i >= 0 {
			return host[:i]
		}
		return host
	case TenantByPathPrefix:
		if i := bytes.Index(target, []byte("://")); i >= 0 {
			// absolute-form: skip the scheme and authority
			target = target[i+3:]
			if j := bytes.IndexByte(target, '/'); j >= 0 {
				target = target[j:]
			} else {
				return nil
			}
		}
		target = bytes.TrimPrefix(target, []byte("/"))
		if i := bytes.IndexAny(target, "/?"); i >= 0 {
			return target[:i]
		}
		return target
	}
	return nil
}
