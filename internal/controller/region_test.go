package controller

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
)

// regionFleet is a fleet of desired instances in each of regions (on the fake provider).
func regionFleet(name, image string, desired int32, regions ...string) *v1alpha1.Fleet {
	f := fleetSpec(name, image, desired)
	f.Spec.Regions = nil
	for _, r := range regions {
		f.Spec.Regions = append(f.Spec.Regions, v1alpha1.Region{Name: r, Provider: "fake"})
	}
	v1alpha1.SetFleetDefaults(f, "fake")
	return f
}

// byRegion returns the names of the fleet's provider instances in each region, sorted.
func (e *env) byRegion(fleet string) map[string][]string {
	out := map[string][]string{}
	for _, o := range e.observed(fleet) {
		r := o.Labels[v1alpha1.LabelRegion]
		out[r] = append(out[r], o.Name)
	}
	for _, names := range out {
		slices.Sort(names)
	}
	return out
}

// regionsConverged says what keeps each region of want from running exactly that many Ready
// instances of rev, with a Ready status.regions entry saying so.
func (e *env) regionsConverged(fleet, rev string, want map[string]int) func() string {
	run := e.regionsRun(fleet, rev, want, v1alpha1.RegionReady)
	return func() string {
		for region := range e.byRegion(fleet) {
			if _, ok := want[region]; !ok {
				return fmt.Sprintf("instances in region %s, want only in %v", region, want)
			}
		}
		return run()
	}
}

// regionsRun says what keeps each region of want from running exactly that many Ready instances
// of rev, with a status.regions entry of that phase saying so.
func (e *env) regionsRun(fleet, rev string, want map[string]int, phase string) func() string {
	return func() string {
		count := map[string]int{}
		for _, o := range e.observed(fleet) {
			if _, ok := want[o.Labels[v1alpha1.LabelRegion]]; !ok {
				continue
			}
			if o.State != provider.StateReady || (rev != "" && o.Labels[v1alpha1.LabelRevision] != rev) {
				return fmt.Sprintf("%s is %s of %s", o.Name, o.State, o.Labels[v1alpha1.LabelRevision])
			}
			count[o.Labels[v1alpha1.LabelRegion]]++
		}
		st := e.fleet(fleet).Status
		for region, n := range want {
			if count[region] != n {
				return fmt.Sprintf("region %s has %d instances, want %d (all: %v)", region, count[region], n, count)
			}
			rs := st.RegionStatusOf(region)
			if rs == nil || rs.Phase != phase || rs.ReadyReplicas != int32(n) || rs.Desired != int32(n) {
				return fmt.Sprintf("status of region %s: %+v", region, rs)
			}
		}
		return ""
	}
}

// Each region runs its own group: the fleet's replicas apply to every region without its own,
// and changing one region's count leaves the other's instances alone.
func TestRegionsScaleIndependently(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := regionFleet("web", "img", 3, "eu", "us")
	f.Spec.Regions[1].Replicas = &v1alpha1.Replicas{Desired: new(int32(1))}
	e.put(f)
	waitFor(t, 5*time.Second, e.regionsConverged("web", RevisionName(f), map[string]int{"eu": 3, "us": 1}))
	if st := e.fleet("web").Status; st.Phase != "Ready" || st.ReadyReplicas != 4 {
		t.Fatalf("fleet status %s with %d ready, want Ready with 4", st.Phase, st.ReadyReplicas)
	}
	eu := e.byRegion("web")["eu"]

	f.Spec.Regions[1].Replicas.Desired = new(int32(4))
	e.put(f)
	waitFor(t, 5*time.Second, e.regionsConverged("web", "", map[string]int{"eu": 3, "us": 4}))
	if got := e.byRegion("web")["eu"]; !slices.Equal(got, eu) {
		t.Fatalf("scaling region us changed region eu's instances: %v, was %v", got, eu)
	}

	// The fleet's desired count moves the region without its own and not the other.
	f.Spec.Replicas.Desired = new(int32(1))
	e.put(f)
	waitFor(t, 5*time.Second, e.regionsConverged("web", "", map[string]int{"eu": 1, "us": 4}))
}

// A region whose provider fails is marked ProviderFailed, keeps its instances, and does not stop
// the other region's scaling in the same reconciles; it catches up once its provider answers.
func TestFailingRegionLeavesOthersReconciled(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := regionFleet("web", "img", 2, "eu", "us")
	e.put(f)
	waitFor(t, 5*time.Second, e.regionsConverged("web", "", map[string]int{"eu": 2, "us": 2}))
	us := e.byRegion("web")["us"]

	e.fake.FailRegion("us", errors.New("regional API unavailable"))
	f.Spec.Replicas.Desired = new(int32(3))
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		st := e.fleet("web").Status
		eu, rus := st.RegionStatusOf("eu"), st.RegionStatusOf("us")
		if eu == nil || eu.Phase != v1alpha1.RegionReady || eu.ReadyReplicas != 3 {
			return fmt.Sprintf("region eu: %+v", eu)
		}
		if rus == nil || rus.Phase != v1alpha1.RegionProviderFailed || !strings.Contains(rus.Message, "regional API unavailable") || !strings.Contains(rus.Message, "region us") {
			return fmt.Sprintf("region us: %+v", rus)
		}
		if st.Phase != "Degraded" || !strings.Contains(st.Message, "region us") {
			return fmt.Sprintf("fleet %s: %s", st.Phase, st.Message)
		}
		return ""
	})
	// The failed region's records are kept as they were: nothing is replaced or forgotten.
	var recs []string
	for _, in := range e.records("web") {
		if in.Spec.Region == "us" {
			recs = append(recs, in.Metadata.Name)
		}
	}
	slices.Sort(recs)
	if !slices.Equal(recs, us) {
		t.Fatalf("records of the failed region %v, want its instances %v", recs, us)
	}
	if got := e.byRegion("web")["us"]; !slices.Equal(got, us) {
		t.Fatalf("instances of the failed region changed: %v, was %v", got, us)
	}

	e.fake.FailRegion("us", nil)
	waitFor(t, 5*time.Second, e.regionsConverged("web", "", map[string]int{"eu": 3, "us": 3}))
}

// fakeReach answers RegionUnreachable from a table.
type fakeReach struct {
	mu   sync.Mutex
	down map[string]string
}

func (r *fakeReach) RegionUnreachable(region string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	why, ok := r.down[region]
	return why, ok
}

func (r *fakeReach) set(region, why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if why == "" {
		delete(r.down, region)
	} else {
		r.down[region] = why
	}
}

// A partitioned region is reported Unreachable as soon as RegionChanged says so, and its
// instances, which the load balancer can no longer reach, are kept: a partition is not a death.
// The other region's unhealthy instance is still replaced.
func TestUnreachableRegionKeepsItsInstances(t *testing.T) {
	h := newFakeHealth()
	reach := &fakeReach{down: map[string]string{}}
	p, err := fake.New(fake.Options{BootDelay: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	e := startEnv(t, &env{fake: p, health: h, healBackoff: time.Second, reach: reach})
	f := healFleet("web", 2, 50*time.Millisecond)
	f.Spec.Regions = []v1alpha1.Region{{Name: "eu", Provider: "fake"}, {Name: "us", Provider: "fake"}}
	v1alpha1.SetFleetDefaults(f, "fake")
	e.put(f)
	waitFor(t, 5*time.Second, e.regionsConverged("web", "", map[string]int{"eu": 2, "us": 2}))
	byRegion := e.byRegion("web")

	reach.set("us", "no route from the internet to region us")
	start := time.Now()
	e.ctrl.RegionChanged("us")
	waitFor(t, 5*time.Second, func() string {
		rs := e.fleet("web").Status.RegionStatusOf("us")
		if rs == nil || rs.Phase != v1alpha1.RegionUnreachable || !strings.Contains(rs.Message, "no route") {
			return fmt.Sprintf("region us: %+v", rs)
		}
		return ""
	})
	t.Logf("region us reported unreachable %s after RegionChanged", time.Since(start).Round(time.Millisecond))

	for _, name := range byRegion["us"] {
		h.set(name, HealthUnhealthy)
	}
	victim := byRegion["eu"][0]
	h.set(victim, HealthUnhealthy)
	waitFor(t, 5*time.Second, func() string {
		if e.exists("web", victim) {
			return "the unhealthy instance of the reachable region is still there"
		}
		return ""
	})
	e.waitReconciles(20)
	if got := e.byRegion("web")["us"]; !slices.Equal(got, byRegion["us"]) {
		t.Fatalf("instances of the unreachable region were replaced: %v, were %v", got, byRegion["us"])
	}

	// Back: healthy again, the region is Ready and nothing was lost.
	for _, name := range byRegion["us"] {
		h.set(name, HealthHealthy)
	}
	reach.set("us", "")
	e.ctrl.RegionChanged("us")
	waitFor(t, 5*time.Second, e.regionsConverged("web", "", map[string]int{"eu": 2, "us": 2}))
}

// regionSink records, for every load balancer update, which revisions each region's records had,
// so that a test can tell whether a region ever got an instance of a revision.
type regionSink struct {
	weightSink
	mu sync.Mutex
	// seen maps region/revision to the first time a record of it was given to the load balancer;
	// staleAt maps region/revision to whether, at that time, another region still had instances of
	// an older revision.
	seen map[string]time.Time
	// oldLeft maps region/revision to the number of other-revision records of the other regions
	// when it was first seen.
	oldLeft map[string]map[string]int
}

func (r *regionSink) SetFleetTargets(f *v1alpha1.Fleet, ins []*v1alpha1.Instance, weights map[string]int32) {
	r.weightSink.SetFleetTargets(f, ins, weights)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, in := range ins {
		key := in.Spec.Region + "/" + in.Spec.Revision
		if _, ok := r.seen[key]; ok {
			continue
		}
		r.seen[key] = time.Now()
		left := map[string]int{}
		for _, o := range ins {
			if o.Spec.Region != in.Spec.Region && o.Spec.Revision != in.Spec.Revision && o.Status.Phase != v1alpha1.PhaseTerminating {
				left[o.Spec.Region]++
			}
		}
		r.oldLeft[key] = left
	}
}

func (r *regionSink) ever(region, rev string) (time.Time, map[string]int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.seen[region+"/"+rev]
	return at, r.oldLeft[region+"/"+rev], ok
}

func waveEnv(t *testing.T, stats StatsSource) (*env, *regionSink) {
	t.Helper()
	sink := &regionSink{seen: map[string]time.Time{}, oldLeft: map[string]map[string]int{}}
	return startEnv(t, &env{targets: sink, stats: stats}), sink
}

// A canary that fails its analysis in the first region of the wave rolls that region back, and
// the second region never gets an instance of the bad revision.
func TestWaveStopsAtFirstRegionOnFailedCanary(t *testing.T) {
	stats := &fakeStats{byRev: map[string]RevisionStats{}}
	e, sink := waveEnv(t, stats)
	f := regionFleet("web", "img-1", 2, "eu", "us")
	f.Spec.Rollout.Strategy = v1alpha1.StrategyCanary
	f.Spec.Rollout.Steps = []v1alpha1.CanaryStep{step(50, time.Minute)}
	f.Spec.Rollout.RegionOrder = []string{"us", "eu"}
	v1alpha1.SetFleetDefaults(f, "fake")
	e.put(f)
	oldRev := RevisionName(f)
	waitFor(t, 5*time.Second, e.regionsConverged("web", oldRev, map[string]int{"eu": 2, "us": 2}))

	f.Spec.Image = "img-bad"
	newRev := RevisionName(f)
	stats.mu.Lock()
	stats.byRev[oldRev] = RevisionStats{Requests: 1000, Errors5xx: 2}
	stats.byRev[newRev] = RevisionStats{Requests: 300, Errors5xx: 90}
	stats.mu.Unlock()
	e.put(f)
	waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutRolledBack))
	waitFor(t, 5*time.Second, e.regionsRun("web", oldRev, map[string]int{"us": 2}, v1alpha1.RegionDegraded))
	waitFor(t, 5*time.Second, e.regionsRun("web", oldRev, map[string]int{"eu": 2}, v1alpha1.RegionReady))

	if _, _, ok := sink.ever("us", newRev); !ok {
		t.Fatal("the first region of the wave (us) never got a canary: the test proves nothing")
	}
	if at, _, ok := sink.ever("eu", newRev); ok {
		t.Fatalf("region eu, after the failed region, got an instance of the bad revision at %s", at)
	}
	st := e.fleet("web").Status
	if !strings.Contains(st.Rollout.Message, "region us") || !strings.Contains(st.Rollout.Message, "5xx rate") {
		t.Fatalf("rollout message %q, want the failed region and the reason", st.Rollout.Message)
	}
	if rr := st.RegionStatusOf("us").Rollout; rr == nil || rr.Phase != v1alpha1.RolloutRolledBack {
		t.Fatalf("region us rollout %+v, want RolledBack", rr)
	}
	if rr := st.RegionStatusOf("eu").Rollout; rr == nil || rr.Phase != v1alpha1.RolloutWaiting {
		t.Fatalf("region eu rollout %+v, want Waiting (never reached)", rr)
	}
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonRolloutRolledBack, 1))
}

// A good revision goes through the regions in spec.rollout.regionOrder: the second region gets
// its first instance of it only once the first has none of the old one left.
func TestWaveGoesRegionByRegion(t *testing.T) {
	for _, strategy := range []v1alpha1.RolloutStrategy{v1alpha1.StrategyRolling, v1alpha1.StrategyCanary} {
		t.Run(string(strategy), func(t *testing.T) {
			stats := &fakeStats{byRev: map[string]RevisionStats{}}
			e, sink := waveEnv(t, stats)
			f := regionFleet("web", "img-1", 2, "eu", "us", "ap")
			f.Spec.Rollout.Strategy = strategy
			if strategy == v1alpha1.StrategyCanary {
				f.Spec.Rollout.Steps = []v1alpha1.CanaryStep{step(50, 50*time.Millisecond)}
			}
			f.Spec.Rollout.RegionOrder = []string{"ap", "eu"}
			v1alpha1.SetFleetDefaults(f, "fake")
			e.put(f)
			oldRev := RevisionName(f)
			want := map[string]int{"eu": 2, "us": 2, "ap": 2}
			waitFor(t, 5*time.Second, e.regionsConverged("web", oldRev, want))

			f.Spec.Image = "img-2"
			newRev := RevisionName(f)
			stats.mu.Lock()
			stats.byRev[oldRev] = RevisionStats{Requests: 1000, Errors5xx: 1}
			stats.byRev[newRev] = RevisionStats{Requests: 500}
			stats.mu.Unlock()
			e.put(f)
			waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
			waitFor(t, 5*time.Second, e.regionsConverged("web", newRev, want))

			order := []string{"ap", "eu", "us"}
			var times []time.Time
			for i, region := range order {
				at, left, ok := sink.ever(region, newRev)
				if !ok {
					t.Fatalf("region %s never got %s", region, newRev)
				}
				times = append(times, at)
				for _, earlier := range order[:i] {
					if left[earlier] > 0 {
						t.Fatalf("region %s got %s while region %s, earlier in the wave, still had %d instances of another revision", region, newRev, earlier, left[earlier])
					}
				}
			}
			t.Logf("%s wave: first instance in ap, eu, us at +0s, +%s, +%s", strategy, times[1].Sub(times[0]).Round(time.Millisecond), times[2].Sub(times[0]).Round(time.Millisecond))
		})
	}
}

// A controller stopped in the middle of a wave resumes it at the region and step it had reached:
// every region's canary step happens once.
func TestWaveResumesAfterRestart(t *testing.T) {
	e, _ := waveEnv(t, nil)
	f := regionFleet("web", "img-1", 2, "eu", "us")
	f.Spec.Rollout.Strategy = v1alpha1.StrategyCanary
	f.Spec.Rollout.Steps = []v1alpha1.CanaryStep{step(50, 400*time.Millisecond)}
	v1alpha1.SetFleetDefaults(f, "fake")
	e.put(f)
	waitFor(t, 5*time.Second, e.regionsConverged("web", RevisionName(f), map[string]int{"eu": 2, "us": 2}))
	f.Spec.Image = "img-2"
	newRev := RevisionName(f)
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		rs := e.fleet("web").Status.RegionStatusOf("us")
		if rs == nil {
			return "no status of region us"
		}
		if rr := rs.Rollout; rr == nil || rr.Revision != newRev || rr.Phase != v1alpha1.RolloutProgressing || rr.StepStartedAt == nil {
			return fmt.Sprintf("region us rollout %+v, want its step started", rr)
		}
		return ""
	})
	e.stop()
	e.start()
	waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
	waitFor(t, 5*time.Second, e.regionsConverged("web", newRev, map[string]int{"eu": 2, "us": 2}))
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonCanaryStep, 2))
	if n := len(e.events(ReasonRolloutStarted)); n != 1 {
		t.Fatalf("%d rollout starts, want 1 (resumed, not restarted)", n)
	}
	var msgs []string
	for _, ev := range e.events(ReasonCanaryStep) {
		msgs = append(msgs, ev.Message)
	}
	if len(msgs) != 2 || !strings.Contains(msgs[0], "in region eu") || !strings.Contains(msgs[1], "in region us") {
		t.Fatalf("canary steps %q, want one in region eu then one in region us", msgs)
	}
}

// The warm pool and scale to zero are per region: each region keeps its own warm instances, and a
// region at zero runs none in rotation while the other serves.
func TestWarmPoolAndZeroPerRegion(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := regionFleet("web", "img", 2, "eu", "us")
	f.Spec.Autoscaling = &v1alpha1.Autoscaling{Target: 10, WarmPool: 1}
	f.Spec.Regions[0].Replicas = &v1alpha1.Replicas{Desired: new(int32(0))}
	v1alpha1.SetFleetDefaults(f, "fake")
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		serving, warm := map[string]int{}, map[string]int{}
		for _, in := range e.records("web") {
			if in.Status.Phase != v1alpha1.PhaseReady {
				return in.Metadata.Name + " is " + string(in.Status.Phase)
			}
			if IsWarm(in) {
				warm[in.Spec.Region]++
			} else {
				serving[in.Spec.Region]++
			}
		}
		if serving["eu"] != 0 || serving["us"] != 2 || warm["eu"] != 1 || warm["us"] != 1 {
			return fmt.Sprintf("serving %v, warm %v; want eu 0+1 warm, us 2+1 warm", serving, warm)
		}
		st := e.fleet("web").Status
		if eu := st.RegionStatusOf("eu"); eu == nil || eu.Phase != v1alpha1.RegionReady || eu.Replicas != 0 {
			return fmt.Sprintf("region eu: %+v", eu)
		}
		return ""
	})
}
