package lbsync

import (
	"sync"
	"time"

	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/lb"
)

var (
	_ autoscaler.LoadSource        = Figures{}
	_ autoscaler.RegionLoadSource  = Figures{}
	_ controller.StatsSource       = Figures{}
	_ controller.RegionStatsSource = Figures{}
)

// Figures is where the autoscaler's load and the canary analysis' revision figures come from:
// the load balancers that carry a fleet's traffic. A fleet served regionally (ServedRegionally)
// is counted on its regions' own load balancers, each region on its own, over their admin API;
// any other fleet on herd up's embedded load balancer, region by region by the region of each
// target's instance (MonitorOptions.RegionOf).
type Figures struct {
	Embedded *Monitor
	Regional *Regional
}

// FleetLoad implements autoscaler.LoadSource: a fleet served regionally has the sum of its
// regions' requests and queue, and the worst of their p95.
func (f Figures) FleetLoad(fleet string, window time.Duration) (autoscaler.Load, bool) {
	mons := f.Regional.monitors(fleet)
	if mons == nil {
		return f.Embedded.FleetLoad(fleet, window)
	}
	var sum autoscaler.Load
	found := false
	for _, m := range mons {
		l, ok := m.FleetLoad(fleet, window)
		if !ok {
			continue
		}
		found = true
		sum.RequestsPerSecond += l.RequestsPerSecond
		sum.Queued += l.Queued
		sum.LatencyP95 = max(sum.LatencyP95, l.LatencyP95)
	}
	return sum, found
}

// RegionLoad implements autoscaler.RegionLoadSource.
func (f Figures) RegionLoad(fleet, region string, window time.Duration) (autoscaler.Load, bool) {
	if mons := f.Regional.monitors(fleet); mons != nil {
		if m := mons[region]; m != nil {
			return m.FleetLoad(fleet, window)
		}
		return autoscaler.Load{}, false
	}
	return f.Embedded.RegionLoad(fleet, region, window)
}

// RevisionStats implements controller.StatsSource: a fleet served regionally has the sum of its
// regions' requests and errors, and the worst of their p95.
func (f Figures) RevisionStats(fleet, revision string, since time.Time) (controller.RevisionStats, bool) {
	mons := f.Regional.monitors(fleet)
	if mons == nil {
		return f.Embedded.RevisionStats(fleet, revision, since)
	}
	var sum controller.RevisionStats
	found := false
	for _, m := range mons {
		rs, ok := m.RevisionStats(fleet, revision, since)
		if !ok {
			continue
		}
		found = true
		sum.Requests += rs.Requests
		sum.Errors5xx += rs.Errors5xx
		sum.LatencyP95 = max(sum.LatencyP95, rs.LatencyP95)
	}
	return sum, found
}

// RegionRevisionStats implements controller.RegionStatsSource.
func (f Figures) RegionRevisionStats(fleet, region, revision string, since time.Time) (controller.RevisionStats, bool) {
	if mons := f.Regional.monitors(fleet); mons != nil {
		if m := mons[region]; m != nil {
			return m.RevisionStats(fleet, revision, since)
		}
		return controller.RevisionStats{}, false
	}
	return f.Embedded.RegionRevisionStats(fleet, region, revision, since)
}

// monitors returns the monitors of the regional load balancers serving fleet, by region, or nil
// when the fleet is not served regionally. A region whose load balancer is not reached yet, or
// whose last read failed, is missing: its figures are unknown, not zero.
func (r *Regional) monitors(fleet string) map[string]*Monitor {
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	regions, ok := r.served[fleet]
	if !ok {
		return nil
	}
	out := make(map[string]*Monitor, len(regions))
	for _, region := range regions {
		if rl := r.lbs[region]; rl != nil && rl.mon != nil && rl.mon.src.ok() {
			out[region] = rl.mon.Monitor
		}
	}
	return out
}

// regionMonitor is a Monitor of a regional load balancer, read over its admin API.
type regionMonitor struct {
	*Monitor
	src *adminObserved
}

func newRegionMonitor(admin lb.AdminClient) *regionMonitor {
	// Short calls: the Monitor reads under its lock, and the controller and the autoscaler wait.
	admin.Timeout = 2 * time.Second
	src := &adminObserved{admin: &admin}
	return &regionMonitor{Monitor: NewMonitor(src, MonitorOptions{}), src: src}
}

// adminObserved is a load balancer's health and counters read over its admin API. A read that
// fails answers the last snapshot read (counters that do not move, rather than counters back at
// zero, which would read as a burst when the next read succeeds) and marks the source not ok.
type adminObserved struct {
	admin *lb.AdminClient

	mu     sync.Mutex
	last   lb.Snapshot
	failed bool
}

func (a *adminObserved) Health() []lb.TargetHealth {
	h, err := a.admin.TargetHealth()
	if err != nil {
		return nil
	}
	return h
}

func (a *adminObserved) Metrics() lb.Snapshot {
	snap, err := a.admin.Stats()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.failed = true
		return a.last
	}
	a.last, a.failed = snap, false
	return snap
}

// ok reports whether the last read succeeded (true before the first: the Monitor reads then).
func (a *adminObserved) ok() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.failed
}
