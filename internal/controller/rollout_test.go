package controller

import (
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
)

func TestAnalyze(t *testing.T) {
	a := v1alpha1.CanaryAnalysis{MaxErrorRateRatio: 2, MaxLatencyRatio: 1.5, MinRequests: 100}
	ms := time.Millisecond
	cases := []struct {
		name           string
		canary, stable RevisionStats
		judged, failed bool
	}{
		{"too few canary requests", RevisionStats{Requests: 99, Errors5xx: 99}, RevisionStats{Requests: 1000}, false, false},
		{"too few stable requests", RevisionStats{Requests: 1000, Errors5xx: 500}, RevisionStats{Requests: 10}, false, false},
		{"equal and clean", RevisionStats{Requests: 100, LatencyP95: 20 * ms}, RevisionStats{Requests: 900, LatencyP95: 20 * ms}, true, false},
		{"error rate over ratio", RevisionStats{Requests: 100, Errors5xx: 20}, RevisionStats{Requests: 900, Errors5xx: 9}, true, true},
		{"error rate within ratio", RevisionStats{Requests: 100, Errors5xx: 2}, RevisionStats{Requests: 1000, Errors5xx: 15}, true, false},
		{"one stray error against none", RevisionStats{Requests: 200, Errors5xx: 1}, RevisionStats{Requests: 1000}, true, false},
		{"errors against none", RevisionStats{Requests: 200, Errors5xx: 10}, RevisionStats{Requests: 1000}, true, true},
		{"latency over ratio", RevisionStats{Requests: 100, LatencyP95: 80 * ms}, RevisionStats{Requests: 100, LatencyP95: 40 * ms}, true, true},
		{"latency within ratio", RevisionStats{Requests: 100, LatencyP95: 55 * ms}, RevisionStats{Requests: 100, LatencyP95: 40 * ms}, true, false},
		{"latency jitter under the floor", RevisionStats{Requests: 100, LatencyP95: 3 * ms}, RevisionStats{Requests: 100, LatencyP95: ms}, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := analyze(a, c.canary, c.stable)
			if v.Judged != c.judged || v.Failed != c.failed {
				t.Fatalf("got judged=%v failed=%v (%s), want judged=%v failed=%v", v.Judged, v.Failed, v.Reason, c.judged, c.failed)
			}
		})
	}
}

// weightSink records every update the controller sends to the load balancer.
type weightSink struct {
	mu      sync.Mutex
	updates []sinkUpdate
	refused error
}

type sinkUpdate struct {
	at      time.Time
	weights map[string]int32
	routed  map[string]int // revision -> instances not terminating
}

func (w *weightSink) SetFleetTargets(f *v1alpha1.Fleet, ins []*v1alpha1.Instance, weights map[string]int32) {
	u := sinkUpdate{at: time.Now(), weights: maps.Clone(weights), routed: map[string]int{}}
	for _, in := range ins {
		if in.Status.Phase != v1alpha1.PhaseTerminating {
			u.routed[in.Spec.Revision]++
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.updates = append(w.updates, u)
}
func (w *weightSink) RemoveFleet(string)  {}
func (w *weightSink) Drained(string) bool { return true }

// ListenerError reports refused, as a load balancer that cannot bind the fleet's port would.
func (w *weightSink) ListenerError(string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.refused
}

func (w *weightSink) all() []sinkUpdate {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]sinkUpdate(nil), w.updates...)
}

// fakeStats answers RevisionStats from a fixed table.
type fakeStats struct {
	mu    sync.Mutex
	byRev map[string]RevisionStats
}

func (f *fakeStats) RevisionStats(fleet, rev string, since time.Time) (RevisionStats, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.byRev[rev]
	return s, ok
}

// rolloutPhase waits until the fleet's rollout of rev reaches phase.
func (e *env) rolloutPhase(name, rev, phase string) func() string {
	return func() string {
		ro := e.fleet(name).Status.Rollout
		if ro == nil || ro.Revision != rev || ro.Phase != phase {
			return fmt.Sprintf("rollout %+v, want %s of %s", ro, phase, rev)
		}
		return ""
	}
}

func rolloutEnv(t *testing.T, stats StatsSource) (*env, *weightSink) {
	t.Helper()
	sink := &weightSink{}
	return startEnv(t, &env{targets: sink, stats: stats}), sink
}

// rolledBack says what keeps fleet from having exactly n provider instances, none of them of
// revision rev.
func (e *env) rolledBack(fleet, rev string, n int) func() string {
	return func() string {
		obs := e.observed(fleet)
		for _, o := range obs {
			if o.Labels[v1alpha1.LabelRevision] == rev {
				return "canary instance " + o.Name + " still exists"
			}
		}
		if len(obs) != n {
			return fmt.Sprintf("%d instances, want %d", len(obs), n)
		}
		return ""
	}
}

// BlueGreen: a full new set beside the old one, one update switching all traffic, the old set
// kept for the rollback window and deleted after it.
func TestBlueGreenRollout(t *testing.T) {
	e, sink := rolloutEnv(t, nil)
	f := fleetSpec("web", "img-1", 3)
	f.Spec.Rollout.Strategy = v1alpha1.StrategyBlueGreen
	window := 400 * time.Millisecond
	f.Spec.Rollout.RollbackWindow = &v1alpha1.Duration{Duration: window}
	e.put(f)
	oldRev := RevisionName(f)
	waitFor(t, 5*time.Second, e.converged("web", 3, oldRev))
	f.Spec.Image = "img-2"
	e.put(f)
	newRev := RevisionName(f)
	waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
	waitFor(t, 5*time.Second, e.converged("web", 3, newRev))

	var switchedAt time.Time
	for _, u := range sink.all() {
		if u.weights == nil {
			continue
		}
		if u.weights[newRev] != 0 && u.weights[oldRev] != 0 {
			t.Fatalf("weights %v split traffic: the switch must be one update", u.weights)
		}
		if u.weights[newRev] == 100 {
			if switchedAt.IsZero() {
				switchedAt = u.at
				if u.routed[oldRev] != 3 || u.routed[newRev] != 3 {
					t.Fatalf("at the switch: %v routed, want 3 of each revision", u.routed)
				}
			}
		} else if !switchedAt.IsZero() {
			t.Fatalf("traffic went back to %s after the switch: %v", oldRev, u.weights)
		} else if u.routed[oldRev] != 3 {
			t.Fatalf("an old instance left before the switch: %v routed", u.routed)
		}
	}
	if switchedAt.IsZero() {
		t.Fatal("no update switched all traffic to the new revision")
	}
	for _, u := range sink.all() {
		if u.at.After(switchedAt) && u.routed[oldRev] < 3 && u.at.Sub(switchedAt) < window {
			t.Fatalf("old instances left %s after the switch, before the %s window", u.at.Sub(switchedAt), window)
		}
	}
	if h := e.fleet("web").Status.History; len(h) < 2 || h[0].Revision != newRev || h[1].Revision != oldRev || h[1].Until == nil {
		t.Fatalf("history %+v", h)
	}
}

func canaryFleet(steps ...v1alpha1.CanaryStep) *v1alpha1.Fleet {
	f := fleetSpec("web", "img-1", 4)
	f.Spec.Rollout.Strategy = v1alpha1.StrategyCanary
	f.Spec.Rollout.Steps = steps
	v1alpha1.SetFleetDefaults(f, "")
	return f
}

func step(w int32, pause time.Duration) v1alpha1.CanaryStep {
	return v1alpha1.CanaryStep{Weight: w, Pause: &v1alpha1.Duration{Duration: pause}}
}

// A canary that analyses well goes through its steps and is promoted.
func TestCanaryPromoted(t *testing.T) {
	stats := &fakeStats{byRev: map[string]RevisionStats{}}
	e, sink := rolloutEnv(t, stats)
	f := canaryFleet(step(25, 150*time.Millisecond), step(50, 150*time.Millisecond))
	e.put(f)
	oldRev := RevisionName(f)
	waitFor(t, 5*time.Second, e.converged("web", 4, oldRev))
	f.Spec.Image = "img-2"
	newRev := RevisionName(f)
	stats.byRev[oldRev] = RevisionStats{Requests: 1000, Errors5xx: 1, LatencyP95: 20 * time.Millisecond}
	stats.byRev[newRev] = RevisionStats{Requests: 300, LatencyP95: 21 * time.Millisecond}
	e.put(f)
	waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
	waitFor(t, 5*time.Second, e.converged("web", 4, newRev))
	seen := map[int32]bool{}
	for _, u := range sink.all() {
		if u.weights == nil {
			continue
		}
		w := u.weights[newRev]
		// The first update at 25% has one canary instance (ceil(4 x 25%)); the next step's
		// instances are created while 25% still holds.
		if w == 25 && !seen[25] && u.routed[newRev] != 1 {
			t.Fatalf("at 25%%: %d canary instances, want 1", u.routed[newRev])
		}
		seen[w] = true
		if w == 50 && u.routed[newRev] < 2 {
			t.Fatalf("at 50%%: %d canary instances, want 2", u.routed[newRev])
		}
	}
	if !seen[25] || !seen[50] {
		t.Fatalf("canary weights seen %v, want 25 and 50", seen)
	}
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonCanaryStep, 2))
	if len(e.events(ReasonCanaryStep)) != 2 {
		t.Fatalf("%d canary step events, want 2", len(e.events(ReasonCanaryStep)))
	}
}

// A canary answering 5xx far more than the stable revision is rolled back automatically.
func TestCanaryRolledBackOnErrors(t *testing.T) {
	stats := &fakeStats{byRev: map[string]RevisionStats{}}
	e, _ := rolloutEnv(t, stats)
	f := canaryFleet(step(25, time.Minute), step(50, time.Minute))
	e.put(f)
	oldRev := RevisionName(f)
	waitFor(t, 5*time.Second, e.converged("web", 4, oldRev))
	f.Spec.Image = "img-bad"
	newRev := RevisionName(f)
	stats.byRev[oldRev] = RevisionStats{Requests: 1000, Errors5xx: 2}
	stats.byRev[newRev] = RevisionStats{Requests: 300, Errors5xx: 60}
	e.put(f)
	waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutRolledBack))
	waitFor(t, 5*time.Second, e.rolledBack("web", newRev, 4))
	st := e.fleet("web").Status
	if st.Phase != "Degraded" || !strings.Contains(st.Message, "5xx rate") {
		t.Fatalf("fleet status %s: %s, want Degraded naming the 5xx rate", st.Phase, st.Message)
	}
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonRolloutRolledBack, 1))
}

// A controller stopped in the middle of a canary resumes it from the stored step.
func TestRolloutResumesAfterRestart(t *testing.T) {
	e, _ := rolloutEnv(t, nil)
	f := canaryFleet(step(25, 600*time.Millisecond), step(50, 300*time.Millisecond))
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 4, RevisionName(f)))
	f.Spec.Image = "img-2"
	newRev := RevisionName(f)
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		ro := e.fleet("web").Status.Rollout
		if ro == nil || ro.Revision != newRev || ro.Step != 0 || ro.StepStartedAt == nil {
			return fmt.Sprintf("rollout %+v, want step 0 started", ro)
		}
		return ""
	})
	e.stop()
	stopped := e.fleet("web").Status.Rollout
	e.start()
	waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonCanaryStep, 2))
	if n := len(e.events(ReasonRolloutStarted)); n != 1 {
		t.Fatalf("%d rollout starts, want 1 (resumed, not restarted)", n)
	}
	steps := e.events(ReasonCanaryStep)
	if len(steps) != 2 || !strings.Contains(steps[0].Message, "step 1/2") || !strings.Contains(steps[1].Message, "step 2/2") {
		var msgs []string
		for _, s := range steps {
			msgs = append(msgs, s.Message)
		}
		t.Fatalf("canary steps %q, want step 1/2 then 2/2 once each (stopped at %+v)", msgs, stopped)
	}
	waitFor(t, 5*time.Second, e.converged("web", 4, newRev))
}

// command posts a rollout command (promote or abort) to the API, as the CLI does, and returns
// the answer's status code.
func (e *env) command(fleet, cmd string) int {
	e.t.Helper()
	api := apiserver.New(apiserver.Options{Store: e.store, Token: "t"})
	req := httptest.NewRequest(http.MethodPost, "/v1/fleets/"+fleet+"/rollout/"+cmd, nil)
	req.Header.Set("Authorization", "Bearer t")
	rec := httptest.NewRecorder()
	api.ServeHTTP(rec, req)
	return rec.Code
}

// stepStarted waits until the fleet's rollout of rev has applied the weights of step n.
func (e *env) stepStarted(name, rev string, n int32) func() string {
	return func() string {
		ro := e.fleet(name).Status.Rollout
		if ro == nil || ro.Revision != rev || ro.Step != n || ro.StepStartedAt == nil {
			return fmt.Sprintf("rollout %+v, want step %d of %s started", ro, n, rev)
		}
		return ""
	}
}

// promote skips the remaining canary steps and pauses: the full new set is built and takes all
// traffic, without the second step's weight ever being applied.
func TestCanaryPromotedByUser(t *testing.T) {
	e, sink := rolloutEnv(t, nil)
	f := canaryFleet(step(25, time.Hour), step(50, time.Hour))
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 4, RevisionName(f)))
	if code := e.command("web", "promote"); code != http.StatusConflict {
		t.Fatalf("promote without a rollout: %d, want 409", code)
	}
	f.Spec.Image = "img-2"
	newRev := RevisionName(f)
	e.put(f)
	waitFor(t, 5*time.Second, e.stepStarted("web", newRev, 0))
	if code := e.command("web", "promote"); code != http.StatusOK {
		t.Fatalf("promote: %d, want 200", code)
	}
	waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
	waitFor(t, 5*time.Second, e.converged("web", 4, newRev))
	for _, u := range sink.all() {
		if w := u.weights[newRev]; w != 0 && w != 25 {
			t.Fatalf("weights %v: a promoted canary goes from 25%% to all traffic, nothing between", u.weights)
		}
	}
	if f := e.fleet("web"); !f.Status.Rollout.HandledRequest.Equal(f.Requests.Rollout) {
		t.Fatalf("request %+v not recorded as handled (%+v) after it was carried out", f.Requests.Rollout, f.Status.Rollout.HandledRequest)
	}
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonRolloutPromoted, 1))
	if len(e.events(ReasonRolloutPromoted)) != 1 {
		t.Fatalf("%d promote events, want 1", len(e.events(ReasonRolloutPromoted)))
	}
	if code := e.command("web", "abort"); code != http.StatusConflict {
		t.Fatalf("abort after the rollout ended: %d, want 409", code)
	}
}

// abort rolls back at once: no traffic to the new revision, its instances deleted, the fleet
// Degraded with the reason.
func TestCanaryAbortedByUser(t *testing.T) {
	e, _ := rolloutEnv(t, nil)
	f := canaryFleet(step(25, time.Hour), step(50, time.Hour))
	e.put(f)
	oldRev := RevisionName(f)
	waitFor(t, 5*time.Second, e.converged("web", 4, oldRev))
	f.Spec.Image = "img-2"
	newRev := RevisionName(f)
	e.put(f)
	waitFor(t, 5*time.Second, e.stepStarted("web", newRev, 0))
	if code := e.command("web", "abort"); code != http.StatusOK {
		t.Fatalf("abort: %d, want 200", code)
	}
	waitFor(t, 5*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutRolledBack))
	waitFor(t, 5*time.Second, e.rolledBack("web", newRev, 4))
	ff := e.fleet("web")
	st := ff.Status
	if st.Phase != "Degraded" || !strings.Contains(st.Message, "aborted by user") {
		t.Fatalf("fleet status %s: %s, want Degraded, aborted by user", st.Phase, st.Message)
	}
	if st.Rollout.Weights != nil || !st.Rollout.HandledRequest.Equal(ff.Requests.Rollout) {
		t.Fatalf("rollout after abort %+v, want no weights and the request handled", st.Rollout)
	}
}

// promote of a blue/green rollout that has switched ends its rollback window: the old set goes.
func TestBlueGreenPromoteEndsWindow(t *testing.T) {
	e, _ := rolloutEnv(t, nil)
	f := fleetSpec("web", "img-1", 2)
	f.Spec.Rollout.Strategy = v1alpha1.StrategyBlueGreen
	f.Spec.Rollout.RollbackWindow = &v1alpha1.Duration{Duration: time.Hour}
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 2, RevisionName(f)))
	f.Spec.Image = "img-2"
	newRev := RevisionName(f)
	e.put(f)
	waitFor(t, 10*time.Second, e.stepStarted("web", newRev, 1))
	if code := e.command("web", "promote"); code != http.StatusOK {
		t.Fatalf("promote: %d, want 200", code)
	}
	waitFor(t, 5*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
	waitFor(t, 5*time.Second, e.converged("web", 2, newRev))
}

// A canary step whose pause is over does not end before the analysis has its minimum of requests
// on each side: too little traffic (or counters a restart reset) must not promote a canary
// unexamined.
func TestCanaryStepWaitsForAnalysis(t *testing.T) {
	stats := &fakeStats{byRev: map[string]RevisionStats{}}
	e, _ := rolloutEnv(t, stats)
	f := canaryFleet(step(25, 50*time.Millisecond), step(50, 50*time.Millisecond))
	f.Spec.Listeners = []v1alpha1.Listener{{Name: "http", Port: 8080, InstancePort: 30080, Protocol: v1alpha1.ProtocolHTTP}}
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 4, RevisionName(f)))
	oldRev := RevisionName(f)
	f.Spec.Image = "img-2"
	newRev := RevisionName(f)
	stats.mu.Lock()
	stats.byRev[oldRev] = RevisionStats{Requests: 1000}
	stats.byRev[newRev] = RevisionStats{Requests: 3}
	stats.mu.Unlock()
	e.put(f)
	waitFor(t, 5*time.Second, func() string {
		ro := e.fleet("web").Status.Rollout
		if ro == nil || ro.Revision != newRev || !strings.Contains(ro.Message, "pause over") {
			return fmt.Sprintf("rollout %+v, want step 1 waiting for the analysis", ro)
		}
		return ""
	})
	e.waitReconciles(10)
	if ro := e.fleet("web").Status.Rollout; ro.Step != 0 || ro.Phase != v1alpha1.RolloutProgressing {
		t.Fatalf("rollout %+v moved on without an analysis, want step 0 progressing", ro)
	}
	stats.mu.Lock()
	stats.byRev[newRev] = RevisionStats{Requests: 300}
	stats.mu.Unlock()
	waitFor(t, 10*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
	waitFor(t, 5*time.Second, e.eventsAtLeast(ReasonCanaryStep, 2))
	if n := len(e.events(ReasonCanaryStep)); n != 2 {
		t.Fatalf("%d canary step events, want 2", n)
	}
}

// A fleet without listeners has no target in the load balancer for its health to judge: its
// ready instances serve, and a rollout moves on although the health source knows none of them.
func TestRolloutWithoutListenersServesWhenReady(t *testing.T) {
	h := newFakeHealth()
	h.setDefault("") // what the load balancer says of an instance it has no target for
	e := startEnv(t, &env{targets: &weightSink{}, health: h})
	f := fleetSpec("web", "img-1", 2)
	f.Spec.Rollout.Strategy = v1alpha1.StrategyBlueGreen
	f.Spec.Rollout.RollbackWindow = &v1alpha1.Duration{Duration: 50 * time.Millisecond}
	e.put(f)
	waitFor(t, 5*time.Second, e.converged("web", 2, RevisionName(f)))
	f.Spec.Image = "img-2"
	newRev := RevisionName(f)
	e.put(f)
	waitFor(t, 5*time.Second, e.rolloutPhase("web", newRev, v1alpha1.RolloutSucceeded))
	waitFor(t, 5*time.Second, e.converged("web", 2, newRev))
}
