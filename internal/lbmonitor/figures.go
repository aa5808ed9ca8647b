package lbmonitor

import (
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/controller"
)

var (
	_ controller.ServingSource     = Figures{}
	_ autoscaler.LoadSource        = Figures{}
	_ autoscaler.RegionLoadSource  = Figures{}
	_ controller.StatsSource       = Figures{}
	_ controller.RegionStatsSource = Figures{}
)

// Figures is where the autoscaler's load, the canary analysis' revision figures and whether an
// instance serves come from: the load balancers that carry a fleet's traffic. A fleet served regionally is counted on its
// regions' own load balancers, each region on its own, over their admin API; any other fleet on
// herd up's embedded load balancer, region by region by the region of each target's instance
// (Options.RegionOf).
type Figures struct {
	Embedded *Monitor
	// Regional, when set, has the monitors of the regional load balancers.
	Regional Regional
}

// Regional gives the monitors of the regional load balancers serving a fleet: *regionlb.Regional.
type Regional interface {
	// Monitors returns them by region, or nil when the fleet is not served regionally. A region
	// whose load balancer is not reached yet, or whose last read failed, is missing: its figures
	// are unknown, not zero.
	Monitors(fleet string) map[string]*Monitor
	// ServingMonitor returns the monitor of the load balancer of the fleet's region when that
	// load balancer sends the region's instances their traffic (regional true); the monitor is
	// nil while it is not reached, or its last read failed.
	ServingMonitor(f *v1alpha1.Fleet, region string) (m *Monitor, regional bool)
}

// ServingHealth implements controller.ServingSource: an instance of a fleet served regionally is
// judged by its region's load balancer, read over its admin API (its changes are not notified),
// and serves no one until that load balancer is reached; any other by herd up's embedded one.
func (f Figures) ServingHealth(fl *v1alpha1.Fleet, in *v1alpha1.Instance) (state string, notified bool) {
	if f.Regional != nil {
		if m, regional := f.Regional.ServingMonitor(fl, in.Spec.Region); regional {
			if m == nil {
				return "", false
			}
			state, _ = m.InstanceHealth(in.Metadata.Name)
			return state, false
		}
	}
	state, _ = f.Embedded.InstanceHealth(in.Metadata.Name)
	return state, f.Embedded.notifies()
}

// monitors returns the monitors of the regional load balancers serving fleet, by region, or nil.
func (f Figures) monitors(fleet string) map[string]*Monitor {
	if f.Regional == nil {
		return nil
	}
	return f.Regional.Monitors(fleet)
}

// FleetLoad implements autoscaler.LoadSource: a fleet served regionally has the sum of its
// regions' requests and queue, and the worst of their p95.
func (f Figures) FleetLoad(fleet string, window time.Duration) (autoscaler.Load, bool) {
	mons := f.monitors(fleet)
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
	if mons := f.monitors(fleet); mons != nil {
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
	mons := f.monitors(fleet)
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
	if mons := f.monitors(fleet); mons != nil {
		if m := mons[region]; m != nil {
			return m.RevisionStats(fleet, revision, since)
		}
		return controller.RevisionStats{}, false
	}
	return f.Embedded.RegionRevisionStats(fleet, region, revision, since)
}

// monitors returns the monitors of the regional load balancers serving fleet, by region, or nil
// when the fleet is not served regionally. A region whose load balancer is not reached yet, or
