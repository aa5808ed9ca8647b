package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/provider/local/localtest"
)

// benchEnv, set by make bench-autoscale, makes the benchmark's test run; without it (go test
// ./...) the test skips, so that make test does not boot these instances a second time.
const benchEnv = "HERD_BENCH_AUTOSCALE"

const (
	autoscaleFleet = "autoscale"
	target         = 25 // requests per second per instance
	baseRate       = 22 // about 1x the target
	stepRate       = 4 * target
)

func (e *env) desired() int32 {
	out, err := e.herd("get", "fleets", autoscaleFleet, "-o", "json")
	if err != nil {
		return -1
	}
	var f v1alpha1.Fleet
	if json.Unmarshal([]byte(out), &f) != nil || f.Spec.Replicas.Desired == nil {
		var list []v1alpha1.Fleet
		if json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].Spec.Replicas.Desired == nil {
			return -1
		}
		f = list[0]
	}
	return *f.Spec.Replicas.Desired
}

func (e *env) apply(max, warmPool int) {
	e.t.Helper()
	fleet := filepath.Join(e.dir, "fleet.yaml")
	if err := os.WriteFile(fleet, fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: hello
  replicas: {min: 1, max: %d, desired: 1}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1}
  autoscaling: {metric: requestsPerSecond, target: %d, scaleInStabilization: 300s, warmPool: %d}
  regions: [{name: local, provider: local}]
`, autoscaleFleet, max, e.lbPort, helloPort, helloPort, target, warmPool), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if out, err := e.herd("apply", "-f", fleet); err != nil {
		e.t.Fatalf("herd apply: %v\n%s", err, out)
	}
}

// settle waits for one serving instance healthy in the load balancer and warm Ready warm ones,
// and returns the serving and warm instance names.
func (e *env) settle(warm int) (serving, warmNames []string) {
	e.t.Helper()
	e.waitFor(bootLimit, 500*time.Millisecond, func() string {
		serving, warmNames = nil, nil
		var states []string
		for _, in := range e.instances() {
			states = append(states, fmt.Sprintf("%s %s/%s", in.Metadata.Name, in.Status.Phase, in.Status.LBHealth))
			switch {
			case controller.IsWarm(&in) && in.Status.Phase == v1alpha1.PhaseReady:
				warmNames = append(warmNames, in.Metadata.Name)
			case !controller.IsWarm(&in) && in.Status.Phase == v1alpha1.PhaseReady && in.Status.LBHealth == "healthy":
				serving = append(serving, in.Metadata.Name)
			}
		}
		if len(serving) != 1 || len(warmNames) != warm {
			return fmt.Sprintf("want 1 serving and %d warm instances Ready, have: %s", warm, strings.Join(states, ", "))
		}
		return ""
	})
	return serving, warmNames
}

// deleteFleet deletes the fleet and waits until no instance is left.
func (e *env) deleteFleet() {
	e.t.Helper()
	if out, err := e.herd("delete", "fleet", autoscaleFleet); err != nil {
		e.t.Fatalf("delete fleet: %v %s", err, out)
	}
	e.waitFor(2*time.Minute, 250*time.Millisecond, func() string {
		if ins := e.instances(); ins == nil || len(ins) > 0 {
			return fmt.Sprintf("%d instances left after deleting the fleet", len(ins))
		}
		return ""
	})
}

// rateLoad sends rate requests per second through the load balancer and records which instance
// answered each, and when.
type rateLoad struct {
	url    string
	client *http.Client
	mu     sync.Mutex
	rate   int
	firsts map[string]time.Time // instance -> first answer
	failed int
	stop   chan struct{}
	wg     sync.WaitGroup
}

func startRateLoad(url string, rate int) *rateLoad {
	l := &rateLoad{url: url, rate: rate, firsts: map[string]time.Time{}, stop: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	l.wg.Go(func() {
		next := time.Now()
		for {
			l.mu.Lock()
			every := time.Second / time.Duration(l.rate)
			l.mu.Unlock()
			next = next.Add(every)
			select {
			case <-l.stop:
				return
			case <-time.After(time.Until(next)):
			}
			l.wg.Go(l.one)
		}
	})
	return l
}

func (l *rateLoad) one() {
	resp, err := l.client.Get(l.url)
	if err != nil {
		l.mu.Lock()
		l.failed++
		l.mu.Unlock()
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var reply struct {
		Instance string `json:"instance"`
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &reply) != nil || reply.Instance == "" {
		l.failed++
		return
	}
	if _, ok := l.firsts[reply.Instance]; !ok {
		l.firsts[reply.Instance] = time.Now()
	}
}

func (l *rateLoad) setRate(r int) {
	l.mu.Lock()
	l.rate = r
	l.mu.Unlock()
}

// firstOther returns which instance not in known answered first, and when, if one did.
func (l *rateLoad) firstOther(known []string) (string, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	var firstName string
	for name, at := range l.firsts {
		isKnown := false
		for _, k := range known {
			isKnown = isKnown || k == name
		}
		if !isKnown && (first.IsZero() || at.Before(first)) {
			first, firstName = at, name
		}
	}
	return firstName, first, !first.IsZero()
}

func (l *rateLoad) finish() int {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	l.client.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// step runs about 1x the target for a few seconds, then 4x, and returns the time from the step to
// desired raised and to an instance outside known answering through the load balancer, and that
// instance. Desired is polled through the CLI (each poll takes tens of milliseconds), so decision
// may come out later than serving when a warm instance is registered at once.
func (e *env) step(known []string) (decision, serving time.Duration, newcomer string) {
	e.t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/", e.lbPort)
	l := startRateLoad(url, baseRate)
	defer func() {
		if failed := l.finish(); failed > 0 {
			e.t.Logf("%d requests failed during the rateLoad step", failed)
		}
	}()
	// About 1x: the fleet stays at one instance.
	e.waitFor(10*time.Second, 200*time.Millisecond, func() string {
		if _, _, seen := l.firstOther(nil); !seen {
			return "no answer yet at 1x"
		}
		return ""
	})
	settleUntil := time.Now().Add(3 * time.Second)
	e.waitFor(5*time.Second, 200*time.Millisecond, func() string {
		if d := e.desired(); d != 1 {
			e.t.Fatalf("desired %d at about 1x the target, want 1", d)
		}
		if time.Now().Before(settleUntil) {
			return "steady at 1x"
		}
		return ""
	})
	start := time.Now()
	l.setRate(stepRate)
	e.waitFor(30*time.Second, 50*time.Millisecond, func() string {
		if d := e.desired(); d <= 1 {
			return fmt.Sprintf("desired %d after the step to 4x", d)
		}
		decision = time.Since(start)
		return ""
	})
	e.waitFor(bootLimit, 50*time.Millisecond, func() string {
		name, at, ok := l.firstOther(known)
		if !ok {
			return "no new instance answering through the load balancer"
		}
		serving, newcomer = at.Sub(start), name
		return ""
	})
	return decision, serving, newcomer
}

// TestIntegrationBenchAutoscale is make bench-autoscale's run (hack/bench/e2e). At most three real
// instances exist at a time: 1 growing to 3 without a warm pool, then 1 serving and 1 warm growing
// to 2 serving and 1 warm.
func TestIntegrationBenchAutoscale(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("run with make bench-autoscale")
	}
	e := newEnv(t)
	before := localtest.Take(t)
	t.Cleanup(func() { e.cleanup(before) })
	if out, err := e.herd("image", "build", "-f", filepath.Join(e.root, "examples", "hello", "image.yaml"), "--data-dir", e.data); err != nil {
		t.Fatalf("herd image build: %v\n%s", err, tail(out, 30))
	}
	e.startUp()
	e.lbPort = freePort(t)

	// Without a warm pool: the new capacity is a booted instance.
	e.apply(3, 0)
	serving, _ := e.settle(0)
	decision, newCapacity, _ := e.step(serving)
	t.Logf("no warm pool: desired raised %.3fs and a new instance serving %.3fs after the step", decision.Seconds(), newCapacity.Seconds())
	e.deleteFleet()

	// With a warm pool of 1: the new capacity is the warm instance, registered.
	e.apply(2, 1)
	serving, warm := e.settle(1)
	warmDecision, warmServing, newcomer := e.step(serving)
	if !slices.Contains(warm, newcomer) {
		t.Errorf("the first new instance serving was %s, not the warm one (%v)", newcomer, warm)
	}
	t.Logf("warm pool 1: desired raised %.3fs and a new instance serving %.3fs after the step (warm: %v)", warmDecision.Seconds(), warmServing.Seconds(), warm)
	e.deleteFleet()

	t.Logf("autoscale: decision_s=%.3f new_capacity_serving_s=%.3f warm_pool_serving_s=%.3f", decision.Seconds(), newCapacity.Seconds(), warmServing.Seconds())
}
