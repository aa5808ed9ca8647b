package usage

import (
	"math"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agentmetrics"
	"herd.dev/herd/internal/lb"
)

// fakeLB reports per-target counters the test sets: requests answered 2xx and 5xx, each 2xx taking
// 8 ms (the 5-10 ms latency bucket) and each 5xx 2 s.
type fakeLB struct {
	mu      sync.Mutex
	targets map[[2]string][2]uint64 // {listener, instance} -> {2xx, 5xx}
}

func (f *fakeLB) set(listener, instance string, ok, failed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.targets[[2]string{listener, instance}] = [2]uint64{ok, failed}
}

func bucket(seconds float64) int {
	for i, b := range lb.LatencyBuckets {
		if seconds <= b {
			return i
		}
	}
	return len(lb.LatencyBuckets)
}

func (f *fakeLB) Metrics() lb.Snapshot {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs := lb.FleetStats{Fleet: "web"}
	for k, c := range f.targets {
		var st lb.Stats
		st.Requests[lb.Class2xx], st.Requests[lb.Class5xx] = c[0], c[1]
		st.Latency = make([]uint64, len(lb.LatencyBuckets)+1)
		st.Latency[bucket(0.008)] += c[0]
		st.Latency[bucket(2)] += c[1]
		fs.Stats = fs.Stats.Add(st)
		fs.Groups = append(fs.Groups, lb.GroupStats{Listener: k[0], Group: "web-1", Stats: st,
			Targets: []lb.TargetStats{{ID: k[1], Stats: st}}})
	}
	return lb.Snapshot{Fleets: []lb.FleetStats{fs}}
}

type fakeNodes []agentmetrics.Usage

func (n fakeNodes) Usage() []agentmetrics.Usage { return n }

func ptr(v float64) *float64 { return &v }

func instance(name string, phase v1alpha1.InstancePhase) *v1alpha1.Instance {
	in := &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name}}
	in.Spec.Fleet, in.Spec.Region, in.Spec.Revision, in.Status.Phase = "web", "local", "web-1", phase
	return in
}

func near(got *float64, want float64) bool { return got != nil && math.Abs(*got-want) < 1e-9 }

func TestReport(t *testing.T) {
	counters := &fakeLB{targets: map[[2]string][2]uint64{}}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Options{LB: counters, Every: 5 * time.Second, Window: 10 * time.Second, Now: func() time.Time { return now },
		Nodes: fakeNodes{{Fleet: "web", Instance: "web-a", CPUCores: ptr(0.5), MemoryBytes: ptr(100)}, {Fleet: "web", Instance: "web-b", MemoryBytes: ptr(50)}}})
	if err != nil {
		t.Fatal(err)
	}
	insts := []*v1alpha1.Instance{instance("web-b", v1alpha1.PhaseReady), instance("web-a", v1alpha1.PhaseReady), instance("web-c", v1alpha1.PhaseBooting)}
	at := func(d time.Duration, a2xx, a5xx, b2xx uint64) {
		now = now.Add(d)
		counters.set("web/http", "web-a", a2xx, a5xx)
		counters.set("web/http", "web-b", b2xx, 0)
		counters.set("web/tcp", "web-b", b2xx, 0) // a second listener: its counts add up
		s.Sample()
	}

	at(0, 1000, 0, 1000)
	r := s.Report(insts)
	if r.WindowSeconds != 0 || r.Instances[0].RequestsPerSecond != nil || r.Fleets[0].RequestsPerSecond != nil {
		t.Errorf("one sample gave rates: %+v", r)
	}

	at(5*time.Second, 1100, 0, 1000)
	at(5*time.Second, 1180, 20, 1010) // over 10 s: web-a 180 ok + 20 failed, web-b 2 x 10
	r = s.Report(insts)
	a, b, c := r.Instances[0], r.Instances[1], r.Instances[2]
	if r.WindowSeconds != 10 || a.Instance != "web-a" || b.Instance != "web-b" || c.Instance != "web-c" {
		t.Fatalf("report %+v: want a 10 s window over web-a, web-b, web-c in order", r)
	}
	if !near(a.RequestsPerSecond, 20) || !near(a.Errors5xxPerSecond, 2) || !near(a.CPUCores, 0.5) || !near(a.MemoryBytes, 100) ||
		a.LatencyP95Seconds == nil || *a.LatencyP95Seconds <= 1 { // 10% of its requests took 2 s
		t.Errorf("web-a: %+v", a.Usage)
	}
	if !near(b.RequestsPerSecond, 2) || !near(b.Errors5xxPerSecond, 0) || b.CPUCores != nil || !near(b.MemoryBytes, 50) ||
		b.LatencyP95Seconds == nil || *b.LatencyP95Seconds > 0.01 {
		t.Errorf("web-b: %+v", b.Usage)
	}
	if c.Phase != v1alpha1.PhaseBooting || c.RequestsPerSecond != nil || c.CPUCores != nil || c.MemoryBytes != nil {
		t.Errorf("web-c, not a target yet: %+v", c)
	}
	f := r.Fleets[0]
	if len(r.Fleets) != 1 || f.Fleet != "web" || f.Instances != 3 || !near(f.RequestsPerSecond, 22) || !near(f.Errors5xxPerSecond, 2) ||
		!near(f.CPUCores, 0.5) || !near(f.MemoryBytes, 150) {
		t.Errorf("fleet: %+v", r.Fleets)
	}

	// The window slides: the first sample is dropped, and a target whose counters started over
	// (removed and added again) counts from zero rather than going negative.
	at(5*time.Second, 30, 0, 1010)
	r = s.Report(insts)
	if r.WindowSeconds != 10 || !near(r.Instances[0].RequestsPerSecond, 3) || !near(r.Instances[1].RequestsPerSecond, 2) {
		t.Errorf("after a restart of web-a's counters: window %v, %+v, %+v", r.WindowSeconds, r.Instances[0].Usage, r.Instances[1].Usage)
	}
	if n := len(s.samples); n != 3 {
		t.Errorf("%d samples kept, want the window's 3", n)
	}
}

func TestNew(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without LB: no error")
	}
	if _, err := New(Options{LB: &fakeLB{}, Window: -time.Second}); err == nil {
		t.Error("New with a negative window: no error")
	}
	s, err := New(Options{LB: &fakeLB{}})
	if err != nil || s.opts.Every != 5*time.Second || s.opts.Window != 10*time.Second {
		t.Errorf("defaults: %+v, %v", s, err)
	}
}

// TestGroups sums instances per revision and region over the newest span of at least the window,
// and counts an instance whose counters started over from zero.
func TestGroups(t *testing.T) {
	counters := &fakeLB{targets: map[[2]string][2]uint64{}}
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := New(Options{LB: counters, Every: time.Second, Window: 10 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := instance("web-a", v1alpha1.PhaseReady), instance("web-b", v1alpha1.PhaseReady), instance("web-c", v1alpha1.PhaseReady)
	c.Spec.Revision = "web-2"
	insts := []*v1alpha1.Instance{a, b, c}
	if g := s.Groups(insts, 2*time.Second); g != nil {
		t.Fatalf("groups before any sample: %+v", g)
	}
	step := func(a2xx, a5xx, b2xx, c2xx uint64) {
		now = now.Add(time.Second)
		counters.set("web/http", "web-a", a2xx, a5xx)
		counters.set("web/http", "web-b", b2xx, 0)
		counters.set("web/http", "web-c", c2xx, 0)
		s.Sample()
	}
	step(0, 0, 0, 100)
	step(10, 0, 10, 200)
	step(20, 2, 20, 300)
	step(30, 2, 30, 40) // web-c's target was re-added: its counters started over at 0

	g := s.Groups(insts, 2*time.Second)
	if len(g) != 2 || g[0].Revision != "web-1" || g[1].Revision != "web-2" || g[0].Region != "local" {
		t.Fatalf("groups = %+v, want web-1 and web-2 in local", g)
	}
	// web-1 over the last 2 s: a 20 + 2, b 20 -> 42 requests, 2 of them 5xx.
	if !near(g[0].RequestsPerSecond, 21) || !near(g[0].Errors5xxPerSecond, 1) || g[0].LatencyP95Seconds == nil {
		t.Errorf("web-1 = rps %v, 5xx/s %v, p95 %v; want 21, 1 and a p95", deref(g[0].RequestsPerSecond), deref(g[0].Errors5xxPerSecond), g[0].LatencyP95Seconds)
	}
	// web-2: counts from zero after the restart, 40 requests over 2 s.
	if !near(g[1].RequestsPerSecond, 20) {
		t.Errorf("web-2 rps = %v, want 20", deref(g[1].RequestsPerSecond))
	}
	// A window longer than the samples kept uses the longest span there is (3 s).
	if g := s.Groups(insts[:1], time.Minute); len(g) != 1 || !near(g[0].RequestsPerSecond, 32.0/3) {
		t.Errorf("groups over a long window = %+v, want web-a's 32 requests over 3 s", g)
	}
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}
