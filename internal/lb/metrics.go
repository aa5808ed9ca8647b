package lb

import (
	"maps"
	"math"
	"sort"
	"sync/atomic"
	"time"
)

// Class is the class of a request's outcome: its status code's first digit, or a failure with no answer.
type Class int

// Outcome classes, the index of Stats.Requests.
const (
	Class1xx Class = iota
	Class2xx
	Class3xx
	Class4xx
	Class5xx
	// ClassFailed counts requests that got no response at all (the client went away first).
	ClassFailed
	numClasses
)

var classNames = [numClasses]string{"1xx", "2xx", "3xx", "4xx", "5xx", "failed"}

// String names the class as it appears in metric labels.
func (c Class) String() string { return classNames[c] }

func classOf(code int) Class {
	if code < 100 || code > 599 {
		return Class5xx
	}
	return Class(code/100 - 1)
}

// LatencyBuckets are the upper bounds of the latency histogram, in seconds.
var LatencyBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}

// latencyBucketNanos are LatencyBuckets in nanoseconds, for the hot path.
var latencyBucketNanos = func() []int64 {
	out := make([]int64, len(LatencyBuckets))
	for i, b := range LatencyBuckets {
		out[i] = int64(b * 1e9)
	}
	return out
}()

// counters are the live, lock-free counters of one target (or one listener). They only grow, except
// inFlight.
type counters struct {
	requests  [numClasses]atomic.Uint64
	latency   [16]atomic.Uint64 // len(LatencyBuckets)+1; the last bucket is +Inf
	latSumNs  atomic.Uint64
	inFlight  atomic.Int64
	held      atomic.Int64 // listeners only: requests waiting for a healthy target
	retries   atomic.Uint64
	ejections atomic.Uint64
}

func (c *counters) observe(class Class, d time.Duration) {
	c.requests[class].Add(1)
	ns := int64(d)
	i := 0
	for i < len(latencyBucketNanos) && ns > latencyBucketNanos[i] {
		i++
	}
	c.latency[i].Add(1)
	c.latSumNs.Add(uint64(max(ns, 0)))
}

func (c *counters) snapshot() Stats {
	var s Stats
	for i := range c.requests {
		s.Requests[i] = c.requests[i].Load()
	}
	s.Latency = make([]uint64, len(LatencyBuckets)+1)
	for i := range s.Latency {
		s.Latency[i] = c.latency[i].Load()
	}
	s.LatencySum = time.Duration(c.latSumNs.Load())
	s.InFlight = c.inFlight.Load()
	s.Held = c.held.Load()
	s.Retries = c.retries.Load()
	s.Ejections = c.ejections.Load()
	return s
}

// Stats are cumulative counters since a target was added. Subtract two snapshots (Sub) to get the figures
// of the window between them, e.g. for canary analysis or autoscaling.
type Stats struct {
	// Requests counts finished requests by outcome class (index with Class2xx etc.). For a TCP listener a
	// request is a connection: 2xx when it reached a target, 5xx when none could be reached.
	Requests [numClasses]uint64 `json:"requests"`
	// Latency counts requests per LatencyBuckets bucket, plus one last bucket for slower ones.
	Latency []uint64 `json:"latency"`
	// LatencySum is the total time of all counted requests.
	LatencySum time.Duration `json:"latencySum"`
	// InFlight is the number of requests (TCP: connections) open right now.
	InFlight int64 `json:"inFlight"`
	// Held is the number of requests waiting for a healthy target right now (Listener.Hold).
	Held int64 `json:"held,omitempty"`
	// Retries counts requests retried on another target after failing on this one.
	Retries uint64 `json:"retries"`
	// Ejections counts passive ejections.
	Ejections uint64 `json:"ejections"`
}

// Total is the number of finished requests.
func (s Stats) Total() uint64 {
	var n uint64
	for _, v := range s.Requests {
		n += v
	}
	return n
}

// Add returns the sum of s and o.
func (s Stats) Add(o Stats) Stats {
	for i := range s.Requests {
		s.Requests[i] += o.Requests[i]
	}
	lat := make([]uint64, len(LatencyBuckets)+1)
	for i := range lat {
		lat[i] = at(s.Latency, i) + at(o.Latency, i)
	}
	s.Latency = lat
	s.LatencySum += o.LatencySum
	s.InFlight += o.InFlight
	s.Held += o.Held
	s.Retries += o.Retries
	s.Ejections += o.Ejections
	return s
}

// Sub returns the counts of s that happened after prev; InFlight stays as in s.
func (s Stats) Sub(prev Stats) Stats {
	for i := range s.Requests {
		s.Requests[i] -= min(prev.Requests[i], s.Requests[i])
	}
	lat := make([]uint64, len(LatencyBuckets)+1)
	for i := range lat {
		lat[i] = at(s.Latency, i) - min(at(prev.Latency, i), at(s.Latency, i))
	}
	s.Latency = lat
	s.LatencySum -= min(prev.LatencySum, s.LatencySum)
	s.Retries -= min(prev.Retries, s.Retries)
	s.Ejections -= min(prev.Ejections, s.Ejections)
	return s
}

func at(v []uint64, i int) uint64 {
	if i < len(v) {
		return v[i]
	}
	return 0
}

// Quantile estimates the q-quantile (0 < q <= 1) of latency by interpolating inside its histogram
// bucket; it returns 0 when no request was counted.
func (s Stats) Quantile(q float64) time.Duration {
	var total uint64
	for _, v := range s.Latency {
		total += v
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen uint64
	for i, v := range s.Latency {
		if v == 0 || float64(seen+v) < rank {
			seen += v
			continue
		}
		lo := 0.0
		if i > 0 {
			lo = LatencyBuckets[i-1]
		}
		if i == len(LatencyBuckets) {
			return time.Duration(lo * 1e9)
		}
		hi := LatencyBuckets[i]
		frac := (rank - float64(seen)) / float64(v)
		return time.Duration((lo + (hi-lo)*math.Max(0, frac)) * 1e9)
	}
	return time.Duration(LatencyBuckets[len(LatencyBuckets)-1] * 1e9)
}

// Snapshot is a point-in-time copy of every counter, rolled up per fleet and target group.
type Snapshot struct {
	Time   time.Time    `json:"time"`
	Fleets []FleetStats `json:"fleets"`
}

// FleetStats are the stats of one fleet: the sum of its groups plus requests no target could take
// and the counts of its targets removed since the load balancer started.
type FleetStats struct {
	Fleet string `json:"fleet"`
	Stats
	// LatencyP95 is the cumulative 95th percentile latency.
	LatencyP95 time.Duration `json:"latencyP95"`
	Groups     []GroupStats  `json:"groups"`
}

// GroupStats are the stats of one target group: the sum of its targets.
type GroupStats struct {
	Listener string `json:"listener"`
	Group    string `json:"group"`
	Stats
	LatencyP95 time.Duration `json:"latencyP95"`
	Targets    []TargetStats `json:"targets"`
}

// TargetStats are the stats of one target.
type TargetStats struct {
	ID      string `json:"id"`
	Address string `json:"address"`
	State   State  `json:"state"`
	Stats
	LatencyP95 time.Duration `json:"latencyP95"`
}

// Fleet returns the stats of one fleet in s, and whether it was there.
func (s Snapshot) Fleet(name string) (FleetStats, bool) {
	for _, f := range s.Fleets {
		if f.Fleet == name {
			return f, true
		}
	}
	return FleetStats{}, false
}

// Group returns the stats of one group of one fleet in s, and whether it was there.
func (s Snapshot) Group(fleet, group string) (GroupStats, bool) {
	f, _ := s.Fleet(fleet)
	for _, g := range f.Groups {
		if g.Group == group {
			return g, true
		}
	}
	return GroupStats{}, false
}

// Metrics returns a snapshot of every counter, per fleet, group and target (draining targets included).
func (lb *LB) Metrics() Snapshot {
	lb.mu.Lock()
	targets := lb.allTargets()
	listeners := lb.allListeners()
	removed := maps.Clone(lb.removed)
	lb.mu.Unlock()

	type gkey struct{ fleet, listener, group string }
	groups := map[gkey]*GroupStats{}
	fleets := map[string]*FleetStats{}
	fleetOf := func(name string) *FleetStats {
		f := fleets[name]
		if f == nil {
			f = &FleetStats{Fleet: name}
			fleets[name] = f
		}
		return f
	}
	for _, t := range targets {
		ts := TargetStats{ID: t.key.id, Address: t.key.addr, State: t.state(), Stats: t.stats.snapshot()}
		ts.LatencyP95 = ts.Quantile(0.95)
		k := gkey{t.key.fleet, t.key.listener, t.key.group}
		g := groups[k]
		if g == nil {
			g = &GroupStats{Listener: t.key.listener, Group: t.key.group}
			groups[k] = g
		}
		g.Stats = g.Stats.Add(ts.Stats)
		g.Targets = append(g.Targets, ts)
	}
	for k, g := range groups {
		sort.Slice(g.Targets, func(i, j int) bool { return g.Targets[i].ID < g.Targets[j].ID })
		g.LatencyP95 = g.Quantile(0.95)
		f := fleetOf(k.fleet)
		f.Stats = f.Stats.Add(g.Stats)
		f.Groups = append(f.Groups, *g)
	}
	// Requests that no target could take belong to the fleet but to no group.
	for _, l := range listeners {
		if len(l.state.Load().cfg.Routes) > 0 {
			continue // a host router's refusals belong to no fleet; Prometheus has them
		}
		f := fleetOf(l.state.Load().cfg.Fleet)
		f.Stats = f.Stats.Add(l.stats.snapshot())
	}
	for fleet, st := range removed {
		if f, ok := fleets[fleet]; ok {
			f.Stats = f.Stats.Add(st)
		}
	}
	snap := Snapshot{Time: time.Now()}
	for _, f := range fleets {
		sort.Slice(f.Groups, func(i, j int) bool {
			if f.Groups[i].Listener != f.Groups[j].Listener {
				return f.Groups[i].Listener < f.Groups[j].Listener
			}
			return f.Groups[i].Group < f.Groups[j].Group
		})
		f.LatencyP95 = f.Quantile(0.95)
		snap.Fleets = append(snap.Fleets, *f)
	}
	sort.Slice(snap.Fleets, func(i, j int) bool { return snap.Fleets[i].Fleet < snap.Fleets[j].Fleet })
	return snap
}
