package lbmonitor

import (
	"testing"
	"time"

	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbsync/lbsynctest"
)

func snapshot(a, b lb.Stats) lb.Snapshot {
	return lb.Snapshot{Fleets: []lb.FleetStats{{Fleet: "web", Stats: a.Add(b), Groups: []lb.GroupStats{{
		Group: "web-1", Targets: []lb.TargetStats{{ID: "web-a", Stats: a}, {ID: "web-b", Stats: b}},
	}}}}}
}

func TestMonitor(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	src := &lbsynctest.Observed{
		TargetHealth: []lb.TargetHealth{
			{Listener: "web/http", ID: "web-a", State: lb.StateHealthy, Since: t0.Add(-time.Hour)},
			{Listener: "web/http", ID: "web-b", State: lb.StateHealthy, Since: t0.Add(-time.Hour)},
			{Listener: "web/tcp", ID: "web-b", State: lb.StateUnhealthy, Since: t0.Add(-time.Minute)},
		},
		Snapshot: snapshot(lbsynctest.Stats(100, 0), lbsynctest.Stats(100, 10)),
	}
	m := New(src, Options{StatsEvery: 10 * time.Second, StatsWindow: time.Minute})
	m.now = func() time.Time { return now }

	if st, since := m.InstanceHealth("web-b"); st != controller.HealthUnhealthy || !since.Equal(t0.Add(-time.Minute)) {
		t.Fatalf("web-b health %s since %s: want its worst listener's", st, since)
	}
	if st, _ := m.InstanceHealth("web-z"); st != "" {
		t.Fatalf("unknown instance has state %q", st)
	}
	if _, ok := m.FleetLoad("web", time.Second); ok {
		t.Fatal("FleetLoad answered from one sample")
	}
	// First sample: counts since the targets were added.
	if r, e := m.InstanceStats("web-b"); r != 110 || e != 10 {
		t.Fatalf("web-b stats %d/%d, want 110/10", r, e)
	}

	// One second later, 300 more requests in all.
	now = now.Add(time.Second)
	src.Snapshot = snapshot(lbsynctest.Stats(250, 0), lbsynctest.Stats(250, 10))
	l, ok := m.FleetLoad("web", time.Second)
	if !ok || l.RequestsPerSecond != 300 {
		t.Fatalf("FleetLoad = %+v, %v; want 300 rps", l, ok)
	}
	if _, ok := m.FleetLoad("other", time.Second); ok {
		t.Fatal("FleetLoad answered for a fleet the load balancer does not have")
	}

	// Over a minute later: only the last minute counts.
	for range 8 {
		now = now.Add(10 * time.Second)
		m.InstanceStats("web-a")
	}
	src.Snapshot = snapshot(lbsynctest.Stats(350, 0), lbsynctest.Stats(250, 70))
	now = now.Add(10 * time.Second)
	if r, e := m.InstanceStats("web-b"); r != 60 || e != 60 {
		t.Fatalf("web-b stats over the last minute %d/%d, want 60/60", r, e)
	}
	if r, e := m.InstanceStats("web-a"); r != 100 || e != 0 {
		t.Fatalf("web-a stats over the last minute %d/%d, want 100/0", r, e)
	}
}

// notifyingObserved is an lbsynctest.Observed that reports changes as the load balancer does.
type notifyingObserved struct {
	lbsynctest.Observed
	subs []func(lb.TargetChange)
}

func (n *notifyingObserved) OnTargetChange(f func(lb.TargetChange)) { n.subs = append(n.subs, f) }

func (n *notifyingObserved) change(c lb.TargetChange) {
	for _, f := range n.subs {
		f(c)
	}
}

// The Monitor passes the load balancer's changes on to the controller, fleet and instance named,
// and a change makes its cached view stale at once rather than after its TTL, so that the
// reconcile the change brings sees it.
func TestMonitorNotifiesHealthChanges(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	src := &notifyingObserved{Observed: lbsynctest.Observed{TargetHealth: []lb.TargetHealth{
		{Listener: "web/http", Fleet: "web", ID: "web-a", State: lb.StateHealthy, Since: t0},
	}}}
	m := New(src, Options{HealthTTL: time.Hour})
	m.now = func() time.Time { return t0 }
	var got []controller.HealthChange
	if !m.NotifyHealth(func(c controller.HealthChange) { got = append(got, c) }) {
		t.Fatal("NotifyHealth reports no notifications from a load balancer that notifies")
	}
	if st, _ := m.InstanceHealth("web-a"); st != controller.HealthHealthy {
		t.Fatalf("web-a is %q, want healthy", st)
	}
	src.TargetHealth[0].State = lb.StateUnhealthy
	src.change(lb.TargetChange{Fleet: "web", ID: "web-a", State: lb.StateUnhealthy})
	src.change(lb.TargetChange{Fleet: "web", ID: "web-a", State: lb.StateUnhealthy, Errors: true})
	want := []controller.HealthChange{{Fleet: "web", Instance: "web-a"}, {Fleet: "web", Instance: "web-a", Errors: true}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("changes passed on: %+v, want %+v", got, want)
	}
	if st, _ := m.InstanceHealth("web-a"); st != controller.HealthUnhealthy {
		t.Fatalf("after the change web-a is %q within the cache's TTL, want unhealthy", st)
	}

	plain := New(&lbsynctest.Observed{}, Options{})
	if plain.NotifyHealth(func(controller.HealthChange) {}) {
		t.Error("NotifyHealth claims notifications from a load balancer that cannot notify")
	}
}

// With RegionOf, the Monitor counts a fleet's load and revision figures region by region, from
// the targets of each region's instances.
func TestMonitorRegions(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0
	src := &lbsynctest.Observed{Snapshot: snapshot(lbsynctest.Stats(100, 0), lbsynctest.Stats(100, 10))}
	regionOf := map[string]string{"web-a": "eu", "web-b": "us"}
	m := New(src, Options{RegionOf: func(in string) string { return regionOf[in] }})
	m.now = func() time.Time { return now }

	if _, ok := m.RegionLoad("web", "eu", time.Second); ok {
		t.Fatal("RegionLoad answered from one sample")
	}
	since := t0
	if rs, ok := m.RegionRevisionStats("web", "us", "web-1", since); !ok || rs.Requests != 0 {
		t.Fatalf("first RegionRevisionStats = %+v, %v; want a zero baseline", rs, ok)
	}
	now = now.Add(time.Second)
	src.Snapshot = snapshot(lbsynctest.Stats(400, 0), lbsynctest.Stats(150, 30)) // eu +300, us +50 of which 20 5xx
	if l, ok := m.RegionLoad("web", "eu", time.Second); !ok || l.RequestsPerSecond != 300 {
		t.Fatalf("RegionLoad(eu) = %+v, %v; want 300 rps", l, ok)
	}
	if l, ok := m.RegionLoad("web", "us", time.Second); !ok || l.RequestsPerSecond != 70 {
		t.Fatalf("RegionLoad(us) = %+v, %v; want 70 rps", l, ok)
	}
	if l, ok := m.FleetLoad("web", time.Second); !ok || l.RequestsPerSecond != 370 {
		t.Fatalf("FleetLoad = %+v, %v; want both regions' 370 rps", l, ok)
	}
	if _, ok := m.RegionLoad("web", "ap", time.Second); ok {
		t.Error("RegionLoad answered for a region with no target")
	}
	if rs, ok := m.RegionRevisionStats("web", "us", "web-1", since); !ok || rs.Requests != 70 || rs.Errors5xx != 20 {
		t.Fatalf("RegionRevisionStats(us) = %+v, %v; want 70 requests, 20 5xx", rs, ok)
	}
	if rs, ok := m.RegionRevisionStats("web", "eu", "web-1", since); !ok || rs.Requests != 0 {
		t.Fatalf("RegionRevisionStats(eu) from its own first call = %+v, %v; want 0 (its baseline is its own)", rs, ok)
	}
	if _, ok := m.RegionRevisionStats("web", "ap", "web-1", since); ok {
		t.Error("RegionRevisionStats answered for a region with no target")
	}
	if _, ok := m.RegionRevisionStats("web", "us", "web-2", since); ok {
		t.Error("RegionRevisionStats answered for a revision the load balancer does not have")
	}

	plain := New(src, Options{})
	if _, ok := plain.RegionRevisionStats("web", "us", "web-1", since); ok {
		t.Error("a Monitor without RegionOf answered RegionRevisionStats")
	}
	if _, ok := plain.RegionLoad("web", "us", time.Second); ok {
		t.Error("a Monitor without RegionOf answered RegionLoad")
	}
}
