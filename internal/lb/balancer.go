package lb

import (
	"math"
	"net/http"
	"sync/atomic"

	"herd.dev/herd/internal/fnvmix"
)

// balancer picks a usable target of one group, other than exclude (the target a retry moves away from),
// or nil if there is none. key is the request's hash key when it has one (header-hash policy).
// Implementations run on every request: they must not lock or allocate.
type balancer interface {
	pick(g *group, key uint64, hasKey bool, exclude *target) *target
}

func newBalancer(p PolicyType) balancer {
	switch p {
	case PolicyRoundRobin:
		return roundRobin{}
	case PolicyWeighted:
		return weighted{}
	case PolicyHeaderHash:
		return rendezvous{}
	default:
		// sticky-cookie places new clients by least outstanding requests; the cookie lookup is in routes.
		return leastOutstanding{}
	}
}

// group is one target group as routed: immutable except for its cursor.
type group struct {
	name    string
	targets []*target
	sched   []int32 // smooth weighted round-robin order of target indexes (weighted policy only)
	next    atomic.Uint64
	bal     balancer
}

// leastOutstanding picks the usable target with the fewest requests in flight. The scan starts at a
// rotating offset so that ties (for example an idle fleet) spread instead of piling on the first target.
type leastOutstanding struct{}

func (leastOutstanding) pick(g *group, _ uint64, _ bool, exclude *target) *target {
	n := len(g.targets)
	if n == 0 {
		return nil
	}
	start := int(g.next.Add(1) % uint64(n))
	var best *target
	var bestLoad int64
	for i := range n {
		t := g.targets[(start+i)%n]
		if t == exclude || !t.usable() {
			continue
		}
		if load := t.stats.inFlight.Load(); best == nil || load < bestLoad {
			best, bestLoad = t, load
		}
	}
	return best
}

// roundRobin picks usable targets in turn.
type roundRobin struct{}

func (roundRobin) pick(g *group, _ uint64, _ bool, exclude *target) *target {
	n := len(g.targets)
	if n == 0 {
		return nil
	}
	start := int(g.next.Add(1) % uint64(n))
	for i := range n {
		if t := g.targets[(start+i)%n]; t != exclude && t.usable() {
			return t
		}
	}
	return nil
}

// weighted walks a precomputed smooth weighted round-robin schedule, so shares are exact over every
// cycle and a heavy target's turns are spread out instead of bunched.
type weighted struct{}

func (weighted) pick(g *group, _ uint64, _ bool, exclude *target) *target {
	n := len(g.sched)
	if n == 0 {
		return nil
	}
	start := int(g.next.Add(1) % uint64(n))
	for i := range n {
		if t := g.targets[g.sched[(start+i)%n]]; t != exclude && t.usable() {
			return t
		}
	}
	return nil
}

// rendezvous hashes the key with every usable target and picks the highest score (highest random weight
// hashing): a key moves only when its own target goes away. Requests without a key fall back to least
// outstanding requests.
type rendezvous struct{}

func (rendezvous) pick(g *group, key uint64, hasKey bool, exclude *target) *target {
	if !hasKey {
		return leastOutstanding{}.pick(g, 0, false, exclude)
	}
	var best *target
	var bestScore uint64
	for _, t := range g.targets {
		if t == exclude || !t.usable() {
			continue
		}
		if s := fnvmix.Mix64(key ^ t.hash); best == nil || s > bestScore {
			best, bestScore = t, s
		}
	}
	return best
}

// routes is the routing table of one listener, built by Apply and swapped in whole.
type routes struct {
	groups     []*group // groups with traffic (weight > 0), in config order
	sched      []int32  // smooth weighted order of group indexes
	next       atomic.Uint64
	cookie     string             // sticky-cookie name, or ""
	byCookie   map[string]*target // sticky-cookie value -> target
	hashHeader string             // header-hash header, or ""
	nearest    bool               // GroupNearest: the nearest group with a usable target takes the request
	tenants    *tenantRoutes      // a tenancy listener's routes per tenant, or nil
}

// pickKey is what a request contributes to picking: its sticky cookie value and its hash key.
type pickKey struct {
	cookie string
	key    uint64
	hasKey bool
	tenant []byte // on a tenancy listener: the tenant the request names
}

// keyOf extracts the pick key of a net/http request.
func (rt *routes) keyOf(r *http.Request) pickKey {
	var k pickKey
	if rt.cookie != "" {
		if c, err := r.Cookie(rt.cookie); err == nil {
			k.cookie = c.Value
		}
	}
	if rt.hashHeader != "" {
		if v := r.Header.Get(rt.hashHeader); v != "" {
			k.key, k.hasKey = fnvmix.FNV1a(v), true
		}
	}
	if tr := rt.tenants; tr != nil {
		if tr.key == TenantByHeader {
			k.tenant = []byte(r.Header.Get(tr.header))
		} else {
			k.tenant = tenantOf(tr.key, []byte(r.Host), []byte(r.URL.Path))
		}
	}
	return k
}

// pick chooses a target for a request with key k (zero for TCP), avoiding exclude; nil means no
// target can take it.
func (rt *routes) pick(k *pickKey, exclude *target) *target {
	if rt.tenants != nil {
		return rt.tenants.pick(k, exclude)
	}
	if len(rt.groups) == 0 {
		return nil
	}
	if k.cookie != "" && rt.byCookie != nil {
		if t := rt.byCookie[k.cookie]; t != nil && t != exclude && t.usable() {
			return t
		}
	}
	if rt.nearest {
		return rt.pickNearest(k, exclude)
	}
	var slot uint64
	if k.hasKey {
		// The same key lands in the same group for as long as the weights stand.
		slot = fnvmix.Mix64(k.key) % uint64(len(rt.sched))
	} else {
		slot = rt.next.Add(1) % uint64(len(rt.sched))
	}
	first := int(rt.sched[slot])
	if t := rt.groups[first].bal.pick(rt.groups[first], k.key, k.hasKey, exclude); t != nil {
		return t
	}
	// The chosen group has no usable target: any other group with traffic is better than failing.
	for i := 1; i < len(rt.groups); i++ {
		g := rt.groups[(first+i)%len(rt.groups)]
		if t := g.bal.pick(g, k.key, k.hasKey, exclude); t != nil {
			return t
		}
	}
	return nil
}

// pickNearest picks in the group whose nearest usable target (other than exclude) has the lowest
// measured round-trip time; unmeasured targets rank after measured ones, groups in config order. A
// retry (exclude set) so moves to the next nearest group when the first has no other usable target.
func (rt *routes) pickNearest(k *pickKey, exclude *target) *target {
	var best *group
	var bestRTT int64
	for _, g := range rt.groups {
		r, ok := g.nearestRTT(exclude)
		if ok && (best == nil || r < bestRTT) {
			best, bestRTT = g, r
		}
	}
	if best == nil {
		return nil
	}
	return best.bal.pick(best, k.key, k.hasKey, exclude)
}

// nearestRTT returns the lowest round-trip time of g's usable targets other than exclude
// (math.MaxInt64 for unmeasured ones), or false when g has none.
func (g *group) nearestRTT(exclude *target) (int64, bool) {
	var best int64 = math.MaxInt64
	found := false
	for _, t := range g.targets {
		if t == exclude || !t.usable() {
			continue
		}
		found = true
		if r := t.rtt.Load(); r > 0 && r < best {
			best = r
		}
	}
	return best, found
}

// smoothSchedule returns indexes into weights in smooth weighted round-robin order (as nginx interleaves
// upstreams): each index appears in proportion to its weight, spread as evenly as possible.
func smoothSchedule(weights []int) []int32 {
	g, total := 0, 0
	for _, w := range weights {
		g = gcd(g, w)
		total += w
	}
	if total == 0 {
		return nil
	}
	ws := make([]int, len(weights))
	total = 0
	for i, w := range weights {
		ws[i] = w / g
		total += ws[i]
	}
	// Keep the schedule small for huge fleets with odd weights: scaling changes shares by < 0.1%.
	const maxLen = 1 << 16
	if total > maxLen {
		sum := total
		total = 0
		for i, w := range ws {
			if w > 0 {
				ws[i] = max(1, w*maxLen/sum)
			}
			total += ws[i]
		}
	}
	cur := make([]int, len(ws))
	out := make([]int32, 0, total)
	for range total {
		best := -1
		for i, w := range ws {
			cur[i] += w
			if w > 0 && (best < 0 || cur[i] > cur[best]) {
				best = i
			}
		}
		cur[best] -= total
		out = append(out, int32(best))
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
