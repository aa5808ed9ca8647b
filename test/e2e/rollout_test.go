package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/provider/local/localtest"
)

const (
	rolloutFleet = "rollout"
	// rolloutGrace is the boot grace period of the rollouts' fleets: a new set boots while the old
	// one serves, so boots are slower than in an idle fleet (56-71 s were seen beside the HA
	// scenario's other replicas on 2 cores, and a boot past the grace is replaced, not waited
	// for). No scenario waits for the grace to run out: a bad revision is judged by its answers.
	rolloutGrace = 2 * time.Minute
	// paceClients clients each send a request every pace: steady load that leaves the 2 cores of
	// the test machine room to boot the new instances beside the serving ones.
	paceClients = 4
	pace        = 10 * time.Millisecond
)

// rolloutScenario is a herd up with the hello image and a variant of it built, serving a
// 2-instance fleet of hello under steady load through the load balancer.
type rolloutScenario struct {
	*env
	spec     string // the fleet's YAML, with %s for the image
	original map[string]bool
	load     *load
}

// buildVariant builds a node image named name from examples/hello, with the hello container's
// environment variable key set to value in its Deployment.
func (e *env) buildVariant(name, key, value string) {
	e.t.Helper()
	src := filepath.Join(e.root, "examples", "hello")
	dir := filepath.Join(e.dir, name)
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		e.t.Fatal(err)
	}
	for _, m := range []string{"deployment.yaml", "service.yaml"} {
		data, err := os.ReadFile(filepath.Join(src, "manifests", m))
		if err != nil {
			e.t.Fatal(err)
		}
		if m == "deployment.yaml" {
			s, n := string(data), 0
			lines := strings.Split(s, "\n")
			for i, l := range lines {
				if strings.Contains(l, "{name: "+key+",") {
					indent := l[:strings.Index(l, "-")]
					lines[i] = fmt.Sprintf("%s- {name: %s, value: %q}", indent, key, value)
					n++
				}
			}
			if n != 1 {
				e.t.Fatalf("examples/hello's Deployment sets %s %d times, want once", key, n)
			}
			data = []byte(strings.Join(lines, "\n"))
		}
		if err := os.WriteFile(filepath.Join(dir, "manifests", m), data, 0o644); err != nil {
			e.t.Fatal(err)
		}
	}
	img := fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: NodeImage
metadata: {name: %s}
spec:
  manifests: manifests
  images:
  - {name: "hello:v1", main: %s}
`, name, filepath.Join(src, "app"))
	file := filepath.Join(dir, "image.yaml")
	if err := os.WriteFile(file, []byte(img), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if out, err := e.herd("image", "build", "-f", file, "--data-dir", e.data); err != nil {
		e.t.Fatalf("herd image build %s: %v\n%s", name, err, tail(out, 30))
	}
}

// startRolloutScenario builds the images, starts herd up and the fleet (rollout is the YAML of its
// spec.rollout), waits for its 2 instances to serve and starts the load.
func startRolloutScenario(t *testing.T, variant, key, value, rollout string) *rolloutScenario {
	e := newEnv(t, withHello, buildingVariant(variant, key, value))
	before := localtest.Take(t)
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	s := &rolloutScenario{env: e, original: map[string]bool{}}
	e.startUp()
	// Runs before e.cleanup: the fleet goes first, and e.cleanup waits for its instances to go.
	localtest.CleanupOnInterrupt(t, func() {
		if out, err := e.herd("delete", "fleet", rolloutFleet); err != nil {
			t.Logf("delete fleet %s: %v %s", rolloutFleet, err, out)
		}
		if s.load != nil {
			s.load.finish()
		}
	})
	e.lbPort = freeport.TCP(t)
	s.spec = fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: %%s
  replicas: {min: 1, max: 10, desired: 2}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1, gracePeriod: %s}
  regions: [{name: local, provider: local}]
  rollout: %s
`, rolloutFleet, e.lbPort, helloPort, helloPort, rolloutGrace, rollout)
	s.apply("hello")
	for _, in := range e.waitServing(2) {
		s.original[in.Metadata.Name] = true
	}
	s.load = startLoad(fmt.Sprintf("http://127.0.0.1:%d/", e.lbPort), paceClients, pace, 4*time.Minute)
	e.waitFor(30*time.Second, 50*time.Millisecond, func() string { return s.load.unanswered(s.original) })
	return s
}

func (s *rolloutScenario) apply(image string) {
	s.t.Helper()
	s.applyFleet(fmt.Appendf(nil, s.spec, image))
}

// rolloutReached waits until the fleet's rollout of its current revision reaches phase, and
// returns the fleet.
func (s *rolloutScenario) rolloutReached(phase string, timeout time.Duration) *v1alpha1.Fleet {
	s.t.Helper()
	var f *v1alpha1.Fleet
	s.waitFor(timeout, 250*time.Millisecond, func() string {
		s.instances() // record names for the leak check
		f = s.fleet(rolloutFleet)
		if f == nil {
			return "herd get fleet failed"
		}
		ro := f.Status.Rollout
		if ro == nil || ro.Phase != phase || ro.Revision != f.Status.CurrentRevision {
			return fmt.Sprintf("rollout %+v, want %s", ro, phase)
		}
		return ""
	})
	return f
}

// TestIntegrationCanaryRollsBackBadRevision rolls a revision of hello that answers 500 to half of
// its requests out as a canary under load, and checks that the analysis rolls it back on its
// first step (20%), deleting its instance, and that the share of failed requests the clients saw
// stays under that step's weight.
func TestIntegrationCanaryRollsBackBadRevision(t *testing.T) {
	s := startRolloutScenario(t, "hello-bad", "FAIL_PERCENT", "50",
		"{strategy: Canary, steps: [{weight: 20, pause: 20s}, {weight: 100}], analysis: {minRequests: 20}}")
	start := time.Now()
	s.apply("hello-bad")
	f := s.rolloutReached(v1alpha1.RolloutRolledBack, 2*time.Minute)
	rolledBackAt := time.Now()
	rolledBack := rolledBackAt.Sub(start)
	bad := f.Status.Rollout.Revision
	if f.Status.Phase != "Degraded" || !strings.Contains(f.Status.Message, "5xx") {
		t.Errorf("fleet %s: %s, want Degraded naming the canary's 5xx rate", f.Status.Phase, f.Status.Message)
	}
	s.waitFor(30*time.Second, 250*time.Millisecond, func() string {
		ins := s.instances()
		if ins == nil {
			return "herd get instances failed"
		}
		for _, in := range ins {
			if in.Spec.Revision == bad {
				return "canary instance " + in.Metadata.Name + " still exists"
			}
		}
		return ""
	})
	gone := time.Now()
	results := s.load.finish()
	// The share is counted from the first answer of the canary (a failure or a new instance's
	// answer) to when its instances were gone.
	var first time.Time
	for _, r := range results {
		if r.at.Before(start) {
			continue
		}
		if r.err != nil || r.instance != "" && !s.original[r.instance] {
			first = r.at
			break
		}
	}
	if first.IsZero() {
		t.Fatal("the canary never answered a request")
	}
	// While the canary takes traffic: from its first answer to the rollback seen through the API
	// (which includes up to one poll after the load balancer stopped sending it requests).
	total, failed, canary, lastCanary := 0, 0, 0, first
	for _, r := range results {
		if r.at.Before(first) || r.at.After(rolledBackAt) {
			continue
		}
		total++
		switch {
		case r.err != nil:
			failed++
			if failed <= 3 {
				t.Logf("failed request: %v", r.err)
			}
			lastCanary = r.at
		case !s.original[r.instance]:
			canary++
			lastCanary = r.at
		}
	}
	// While the canary's instance is deleted: the stable set alone serves.
	deleting, deletingFailed := 0, 0
	for _, r := range results {
		if r.at.After(rolledBackAt) && !r.at.After(gone) {
			deleting++
			if r.err != nil {
				deletingFailed++
			}
		}
	}
	share := float64(failed) / float64(max(total, 1))
	t.Logf("canary of %s rolled back after %.1f s: %s", bad, rolledBack.Seconds(), f.Status.Rollout.Message)
	t.Logf("canary took traffic for %.2f s; its instances were gone %.1f s after the rollback, with %d of %d requests failed meanwhile",
		lastCanary.Sub(first).Seconds(), gone.Sub(rolledBackAt).Seconds(), deletingFailed, deleting)
	t.Logf("canary: requests=%d failed=%d canary_ok=%d failed_share=%.3f (step weight 20%%)", total, failed, canary, share)
	if share >= 0.20 {
		t.Errorf("%.1f%% of requests failed during the canary, want under the first step's 20%%", 100*share)
	}
}

// TestIntegrationBlueGreenSwitch rolls a good new revision of hello (REVISION v2) out blue/green
// under load, and checks that no request fails from the apply through the switch, the rollback
// window and the deletion of the old set, and that every answer after the first one from the new
// set comes from the new set.
func TestIntegrationBlueGreenSwitch(t *testing.T) {
	s := startRolloutScenario(t, "hello-v2", "REVISION", "v2", "{strategy: BlueGreen, rollbackWindow: 5s}")
	start := time.Now()
	s.apply("hello-v2")
	f := s.rolloutReached(v1alpha1.RolloutSucceeded, 2*time.Minute)
	// Succeeded is written as the old set's deletion begins.
	deletingAt := time.Now()
	v2 := f.Status.Rollout.Revision
	revOf := map[string]string{}
	s.waitFor(30*time.Second, 250*time.Millisecond, func() string {
		ins := s.instances()
		if ins == nil {
			return "herd get instances failed"
		}
		n := 0
		for _, in := range ins {
			revOf[in.Metadata.Name] = in.Spec.Revision
			if in.Spec.Revision == v2 && in.Status.Phase == v1alpha1.PhaseReady {
				n++
			}
		}
		if n != 2 || len(ins) != 2 {
			return fmt.Sprintf("%d instances, %d of them Ready of %s; want just the 2 of %s", len(ins), n, v2, v2)
		}
		return ""
	})
	// A little more load on the new set, then stop.
	s.waitAnswers(s.load, 200, func(instance string) bool { return revOf[instance] == v2 })
	results := s.load.finish()
	failed, after, stale, deleting, deletingFailed := 0, 0, 0, 0, 0
	var switched time.Time
	for _, r := range results {
		if r.at.After(deletingAt) {
			// Counted apart as well, to show what the deletion of the old set costs.
			deleting++
			if r.err != nil {
				deletingFailed++
			}
		}
		if r.err != nil {
			failed++
			if failed <= 5 {
				t.Logf("failed request at start%+dms: %v", r.at.Sub(start).Milliseconds(), r.err)
			}
			continue
		}
		if s.original[r.instance] {
			if !switched.IsZero() {
				stale++
			}
			continue
		}
		if revOf[r.instance] != v2 {
			t.Errorf("answer from %s, neither an original instance nor one of %s", r.instance, v2)
		}
		if switched.IsZero() {
			switched = r.at
		}
		after++
	}
	t.Logf("%d requests; first answer of %s at apply+%.2f s; %d answers after it, %d of them from the old set; %d failed",
		len(results), v2, switched.Sub(start).Seconds(), after+stale, stale, failed)
	t.Logf("while the old set was deleted: %d of %d requests failed", deletingFailed, deleting)
	t.Logf("bluegreen: failed_requests=%d switch_s=%.2f stale_after_switch=%d failed_during_old_set_deletion=%d",
		failed, switched.Sub(start).Seconds(), stale, deletingFailed)
	if failed != 0 {
		t.Errorf("%d of %d requests failed, want 0", failed, len(results))
	}
	if switched.IsZero() {
		t.Fatal("no answer from the new revision")
	}
	if stale != 0 {
		t.Errorf("%d answers from the old revision after the first from %s, want 0", stale, v2)
	}
}
