// Package lbmonitor turns what the load balancers observe (their targets' health and their
// counters) into what the controller's healing, the autoscaler and the canary analysis read: each
// instance's state, each fleet's and each revision's load and errors (Monitor), counted on the
// load balancers that carry each fleet's traffic (Figures).
package lbmonitor

import (
	"sync"
	"sync/atomic"
	"time"

	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/lb"
)

var (
	_ controller.HealthSource   = (*Monitor)(nil)
	_ controller.HealthNotifier = (*Monitor)(nil)
	_ autoscaler.LoadSource     = (*Monitor)(nil)
	_ controller.StatsSource    = (*Monitor)(nil)
)

// Observed is what the Monitor reads of the load balancer; *lb.LB has it.
type Observed interface {
	Health() []lb.TargetHealth
	Metrics() lb.Snapshot
}

// Notifying is what an Observed offers when it can tell of changes: *lb.LB has it. Without it, the
// Monitor cannot notify (NotifyHealth registers nothing) and the controller polls.
type Notifying interface {
	OnTargetChange(func(lb.TargetChange))
}

// Options configure a Monitor. Zero values take the defaults.
type Options struct {
	// HealthTTL is how long one read of the targets' health answers InstanceHealth. Default: 100ms.
	HealthTTL time.Duration
	// StatsWindow is the span InstanceStats covers. Default: 60s.
	StatsWindow time.Duration
	// StatsEvery is how far apart the per-instance samples are kept. Default: 5s.
	StatsEvery time.Duration
	// LoadEvery is how far apart the per-fleet samples for FleetLoad are kept. Default: 100ms.
	LoadEvery time.Duration
	// LoadKeep is how long per-fleet samples are kept: the longest window FleetLoad serves. Default: 10s.
	LoadKeep time.Duration
	// RegionOf names the region of an instance (a target's ID), "" when unknown. With it the
	// Monitor also counts each fleet's targets region by region (RegionLoad,
	// RegionRevisionStats): one load balancer in front of several regions.
	RegionOf func(instance string) string
}

// Monitor turns the load balancer's health and cumulative counters into what the controller's
// healing and autoscaling need: each instance's state and how long it has held it, each instance's
// requests and 5xx over the last minute, and each fleet's requests per second and p95 latency
// over a short window. Samples are taken when asked for, at most once per period, so an idle
// control plane costs nothing.
type Monitor struct {
	src  Observed
	opts Options
	now  func() time.Time

	// stale is set by every change the load balancer reports, so that the next InstanceHealth
	// reads the load balancer again rather than its cached view.
	stale atomic.Bool

	mu       sync.Mutex
	healthAt time.Time
	health   map[string]instHealth
	inst     []instSample  // oldest first
	fleet    []fleetSample // oldest first
	// revBase holds, per fleet, region ("" for the whole fleet) and revision, the counters read
	// at the first RevisionStats call for a given start time: the figures since then are the
	// difference.
	revBase map[[3]string]revBaseline
}

type revBaseline struct {
	since time.Time
	stats lb.Stats
}

type instHealth struct {
	state string
	since time.Time
}

type counts struct{ requests, errors uint64 }

type instSample struct {
	at     time.Time
	counts map[string]counts // instance -> cumulative counts over its listeners
}

type fleetSample struct {
	at     time.Time
	fleets map[string]lb.Stats
	// regions holds each fleet's targets summed by region (with RegionOf only).
	regions map[[2]string]lb.Stats
}

// New returns a Monitor reading src.
func New(src Observed, opts Options) *Monitor {
	if opts.HealthTTL <= 0 {
		opts.HealthTTL = 100 * time.Millisecond
	}
	if opts.StatsWindow <= 0 {
		opts.StatsWindow = time.Minute
	}
	if opts.StatsEvery <= 0 {
		opts.StatsEvery = 5 * time.Second
	}
	if opts.LoadEvery <= 0 {
		opts.LoadEvery = 100 * time.Millisecond
	}
	if opts.LoadKeep <= 0 {
		opts.LoadKeep = 10 * time.Second
	}
	m := &Monitor{src: src, opts: opts, now: time.Now}
	if n, ok := src.(Notifying); ok {
		n.OnTargetChange(func(lb.TargetChange) { m.stale.Store(true) })
	}
	return m
}

// notifies reports whether the Monitor's load balancer tells of changes (NotifyHealth).
func (m *Monitor) notifies() bool {
	_, ok := m.src.(Notifying)
	return ok
}

// NotifyHealth implements controller.HealthNotifier: f hears of every target whose state changed
// and, at most once a second per target, of targets failing requests. Without a notifying load
// balancer it registers nothing and returns false.
func (m *Monitor) NotifyHealth(f func(controller.HealthChange)) bool {
	n, ok := m.src.(Notifying)
	if !ok {
		return false
	}
	// Called by the load balancer with a target's lock held: f only enqueues (the controller's
	// work queue) and m.mu is not taken here, since InstanceHealth holds it while reading the
	// load balancer.
	n.OnTargetChange(func(c lb.TargetChange) {
		f(controller.HealthChange{Fleet: c.Fleet, Instance: c.ID, Errors: c.Errors})
	})
	return true
}

// InstanceHealth implements controller.HealthSource.
func (m *Monitor) InstanceHealth(name string) (string, time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	// A change reported since the last read makes the cache stale: a reconcile that the change
	// triggered must see it, or nothing would bring the fleet back to act on it.
	if stale := m.stale.Swap(false); stale || m.health == nil || now.Sub(m.healthAt) >= m.opts.HealthTTL {
		m.health = map[string]instHealth{}
		m.healthAt = now
		for _, h := range m.src.Health() {
			cur, ok := m.health[h.ID]
			switch {
			case !ok || h.State.Worse(lb.State(cur.state)):
				m.health[h.ID] = instHealth{state: string(h.State), since: h.Since}
			case !lb.State(cur.state).Worse(h.State) && h.Since.After(cur.since): // as bad: the latest change
				// The same state on several listeners: it has held on all of them since the latest.
				m.health[h.ID] = instHealth{state: cur.state, since: h.Since}
			}
		}
	}
	h := m.health[name]
	return h.state, h.since
}

// InstanceStats implements controller.HealthSource: the instance's requests and 5xx (including
// requests that got no answer) over about the last StatsWindow, summed over its listeners.
func (m *Monitor) InstanceStats(name string) (requests, errors5xx uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if len(m.inst) == 0 || now.Sub(m.inst[len(m.inst)-1].at) >= m.opts.StatsEvery {
		m.sampleLocked(now)
	}
	last := m.inst[len(m.inst)-1]
	base := baseline(len(m.inst), func(i int) time.Time { return m.inst[i].at }, now.Add(-m.opts.StatsWindow))
	cur := last.counts[name]
	var prev counts
	if base < len(m.inst)-1 {
		prev = m.inst[base].counts[name]
	}
	// A target added again starts its counters from zero: count from there.
	if prev.requests > cur.requests || prev.errors > cur.errors {
		prev = counts{}
	}
	return cur.requests - prev.requests, cur.errors - prev.errors
}

// FleetLoad implements autoscaler.LoadSource.
func (m *Monitor) FleetLoad(fleet string, window time.Duration) (autoscaler.Load, bool) {
	return m.load(window, func(s fleetSample) (lb.Stats, bool) {
		st, ok := s.fleets[fleet]
		return st, ok
	})
}

// RegionLoad implements autoscaler.RegionLoadSource from the fleet's targets in the region
// (RegionOf). Requests held for want of a target belong to no region: Queued is 0.
func (m *Monitor) RegionLoad(fleet, region string, window time.Duration) (autoscaler.Load, bool) {
	if m.opts.RegionOf == nil {
		return autoscaler.Load{}, false
	}
	return m.load(window, func(s fleetSample) (lb.Stats, bool) {
		st, ok := s.regions[[2]string{fleet, region}]
		return st, ok
	})
}

// load is the rate and p95 over about window of the counters pick reads from each sample, and
// whether the newest sample has them.
func (m *Monitor) load(window time.Duration, pick func(fleetSample) (lb.Stats, bool)) (autoscaler.Load, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	if len(m.fleet) == 0 || now.Sub(m.fleet[len(m.fleet)-1].at) >= m.opts.LoadEvery {
		m.sampleLocked(now)
	}
	if len(m.fleet) < 2 {
		return autoscaler.Load{}, false
	}
	last := m.fleet[len(m.fleet)-1]
	cur, ok := pick(last)
	if !ok {
		return autoscaler.Load{}, false
	}
	base := baseline(len(m.fleet), func(i int) time.Time { return m.fleet[i].at }, now.Add(-window))
	if base >= len(m.fleet)-1 {
		base = len(m.fleet) - 2
	}
	first := m.fleet[base]
	prev, _ := pick(first) // zero when the fleet is newer than the sample: count from its start
	if prev.Total() > cur.Total() {
		prev = lb.Stats{}
	}
	elapsed := last.at.Sub(first.at).Seconds()
	if elapsed <= 0 {
		return autoscaler.Load{}, false
	}
	d := cur.Sub(prev)
	return autoscaler.Load{
		RequestsPerSecond: float64(d.Total()) / elapsed, LatencyP95: d.Quantile(0.95),
		Queued: int(cur.Held),
	}, true
}

// baseline returns the index of the newest sample taken at or before from, or 0 (the oldest) when
// none is that old.
func baseline(n int, at func(int) time.Time, from time.Time) int {
	for i := n - 1; i >= 0; i-- {
		if !at(i).After(from) {
			return i
		}
	}
	return 0
}

// sampleLocked reads the load balancer's counters once and appends to whichever series is due.
func (m *Monitor) sampleLocked(now time.Time) {
	snap := m.src.Metrics()
	if len(m.fleet) == 0 || now.Sub(m.fleet[len(m.fleet)-1].at) >= m.opts.LoadEvery {
		fs := fleetSample{at: now, fleets: make(map[string]lb.Stats, len(snap.Fleets))}
		for _, f := range snap.Fleets {
			fs.fleets[f.Fleet] = f.Stats
		}
		if m.opts.RegionOf != nil {
			fs.regions = m.byRegion(snap)
		}
		m.fleet = append(m.fleet, fs)
		m.fleet = trim(m.fleet, func(s fleetSample) time.Time { return s.at }, now.Add(-m.opts.LoadKeep))
	}
	if len(m.inst) == 0 || now.Sub(m.inst[len(m.inst)-1].at) >= m.opts.StatsEvery {
		is := instSample{at: now, counts: map[string]counts{}}
		for _, f := range snap.Fleets {
			for _, g := range f.Groups {
				for _, t := range g.Targets {
					c := is.counts[t.ID]
					c.requests += t.Total()
					c.errors += t.Requests[lb.Class5xx] + t.Requests[lb.ClassFailed]
					is.counts[t.ID] = c
				}
			}
		}
		m.inst = append(m.inst, is)
		m.inst = trim(m.inst, func(s instSample) time.Time { return s.at }, now.Add(-m.opts.StatsWindow))
	}
}

// trim drops samples older than from, keeping the newest of them as the window's baseline.
func trim[T any](s []T, at func(T) time.Time, from time.Time) []T {
	drop := 0
	for drop+1 < len(s) && !at(s[drop+1]).After(from) {
		drop++
	}
	if drop == 0 {
		return s
	}
	return append(s[:0:0], s[drop:]...)
}

// byRegion sums each fleet's targets by the region of their instance; targets of no known region
// are left out.
func (m *Monitor) byRegion(snap lb.Snapshot) map[[2]string]lb.Stats {
	out := map[[2]string]lb.Stats{}
	for _, f := range snap.Fleets {
		for _, g := range f.Groups {
			for _, t := range g.Targets {
				if region := m.opts.RegionOf(t.ID); region != "" {
					k := [2]string{f.Fleet, region}
					out[k] = out[k].Add(t.Stats)
				}
			}
		}
	}
	return out
}

// RevisionStats implements controller.StatsSource: the revision's target group counters (all
// listeners) since the first call with this since; a later since starts a new window.
func (m *Monitor) RevisionStats(fleet, revision string, since time.Time) (controller.RevisionStats, bool) {
	return m.revisionStats(fleet, "", revision, since, func(g lb.GroupStats) (lb.Stats, bool) { return g.Stats, true })
}

// RegionRevisionStats implements controller.RegionStatsSource: RevisionStats of the revision's
// targets in the region (RegionOf).
func (m *Monitor) RegionRevisionStats(fleet, region, revision string, since time.Time) (controller.RevisionStats, bool) {
	if m.opts.RegionOf == nil {
		return controller.RevisionStats{}, false
	}
	return m.revisionStats(fleet, region, revision, since, func(g lb.GroupStats) (lb.Stats, bool) {
		var sum lb.Stats
		found := false
		for _, t := range g.Targets {
			if m.opts.RegionOf(t.ID) == region {
				sum, found = sum.Add(t.Stats), true
			}
		}
		return sum, found
	})
}

// revisionStats sums what pick reads of the revision's groups, and counts from the baseline of
// (fleet, region, revision) for since.
func (m *Monitor) revisionStats(fleet, region, revision string, since time.Time, pick func(lb.GroupStats) (lb.Stats, bool)) (controller.RevisionStats, bool) {
	snap := m.src.Metrics()
	f, ok := snap.Fleet(fleet)
	if !ok {
		return controller.RevisionStats{}, false
	}
	var cur lb.Stats
	found := false
	for _, g := range f.Groups {
		if g.Group != revision {
			continue
		}
		if st, ok := pick(g); ok {
			cur, found = cur.Add(st), true
		}
	}
	if !found {
		return controller.RevisionStats{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.revBase == nil {
		m.revBase = map[[3]string]revBaseline{}
	}
	key := [3]string{fleet, region, revision}
	base, ok := m.revBase[key]
	if !ok || !base.since.Equal(since) || base.stats.Total() > cur.Total() {
		base = revBaseline{since: since, stats: cur}
		m.revBase[key] = base
	}
	d := cur.Sub(base.stats)
	return controller.RevisionStats{
		Requests:   d.Total(),
		Errors5xx:  d.Requests[lb.Class5xx] + d.Requests[lb.ClassFailed],
		LatencyP95: d.Quantile(0.95),
	}, true
}
