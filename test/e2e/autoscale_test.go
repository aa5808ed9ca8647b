package e2e

import (
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
)

const (
	autoscaleFleet = "autoscale"
	target         = 25 // requests per second per instance
	// baseRate is the load before the step: under the target by more than the strategy's
	// tolerance (a breach is above 1.1x, 27.5 a second), so that a late request or two in one
	// second of the load balancer's window on a busy machine cannot make it a breach.
	baseRate = 15
	stepRate = 4 * target
)

// desired is the autoscaled fleet's spec.replicas.desired, -1 when it cannot be read.
func (e *env) desired() int32 {
	f := e.fleet(autoscaleFleet)
	if f == nil || f.Spec.Replicas.Desired == nil {
		return -1
	}
	return *f.Spec.Replicas.Desired
}

// autoscaleSpec is what varies between the autoscaled fleets of these tests.
type autoscaleSpec struct {
	min, max, desired, warmPool int
	window                      time.Duration // spec.autoscaling.scaleInStabilization
}

func (e *env) apply(a autoscaleSpec) {
	e.t.Helper()
	e.applyFleet(fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: hello
  replicas: {min: %d, max: %d, desired: %d}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1}
  autoscaling: {metric: requestsPerSecond, target: %d, scaleInStabilization: %s, warmPool: %d}
  regions: [{name: local, provider: local}]
`, autoscaleFleet, a.min, a.max, a.desired, e.lbPort, helloPort, helloPort, target, a.window, a.warmPool))
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
	url      string
	client   *http.Client
	mu       sync.Mutex
	rate     int
	firsts   map[string]time.Time // instance -> first answer
	failed   int
	answered int
	stop     chan struct{}
	wg       sync.WaitGroup
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
			// A late tick does not send the requests it missed in a burst afterwards: the rate
			// stays at most rate in every second the load balancer measures.
			if next = next.Add(every); next.Before(time.Now()) {
				next = time.Now()
			}
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
	r := get(l.client, l.url)
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.err != nil {
		l.failed++
		return
	}
	l.answered++
	if _, ok := l.firsts[r.instance]; !ok {
		l.firsts[r.instance] = r.at
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
		if !slices.Contains(known, name) && (first.IsZero() || at.Before(first)) {
			first, firstName = at, name
		}
	}
	return firstName, first, !first.IsZero()
}

// finish stops the load, waits for the requests under way and returns how many failed and how
// many were answered.
func (l *rateLoad) finish() (failed, answered int) {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	l.client.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed, l.answered
}

// step runs baseRate for a few seconds, then 4x the target, and returns the time from the step to
// desired raised and to an instance outside known answering through the load balancer, and that
// instance. Desired is polled through the CLI (each poll takes tens of milliseconds), so decision
// may come out later than serving when a warm instance is registered at once.
func (e *env) step(known []string) (decision, serving time.Duration, newcomer string) {
	e.t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/", e.lbPort)
	l := startRateLoad(url, baseRate)
	defer func() {
		if failed, _ := l.finish(); failed > 0 {
			e.t.Logf("%d requests failed during the rateLoad step", failed)
		}
	}()
	// Under the target: the fleet stays at one instance.
	e.waitFor(10*time.Second, 200*time.Millisecond, func() string {
		if _, _, seen := l.firstOther(nil); !seen {
			return "no answer yet before the step"
		}
		return ""
	})
	settleUntil := time.Now().Add(3 * time.Second)
	e.waitFor(5*time.Second, 200*time.Millisecond, func() string {
		if d := e.desired(); d != 1 {
			e.t.Fatalf("desired %d at %d requests a second (target %d per instance), want 1", d, baseRate, target)
		}
		if time.Now().Before(settleUntil) {
			return "steady before the step"
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

// TestIntegrationAutoscale steps the load on a fleet of real instances from 0.6x to 4x its
// target through the load balancer: the autoscaler must raise desired and a new instance must
// serve. Then the load drops to a trickle: once the 10 s stabilization window has passed, the fleet
// must scale back in to one instance, draining first, so that no request of the trickle fails.
// Then, with a warm pool of one, the first new instance to serve after the step must be the warm
// one. The last line logged is the figures make bench-autoscale prints; at most three real
// instances exist at a time.
func TestIntegrationAutoscale(t *testing.T) {
	e := startHelloEnv(t)

	// Without a warm pool: the new capacity is a booted instance.
	e.apply(autoscaleSpec{min: 1, max: 3, desired: 1, window: 10 * time.Second})
	serving, _ := e.settle(0)
	decision, newCapacity, _ := e.step(serving)
	t.Logf("no warm pool: desired raised %.3fs and a new instance serving %.3fs after the step", decision.Seconds(), newCapacity.Seconds())
	e.scaleIn()
	e.deleteFleet()

	// With a warm pool of 1: the new capacity is the warm instance, registered.
	e.apply(autoscaleSpec{min: 1, max: 2, desired: 1, warmPool: 1, window: 300 * time.Second})
	serving, warm := e.settle(1)
	warmDecision, warmServing, newcomer := e.step(serving)
	if !slices.Contains(warm, newcomer) {
		t.Errorf("the first new instance serving was %s, not the warm one (%v)", newcomer, warm)
	}
	t.Logf("warm pool 1: desired raised %.3fs and a new instance serving %.3fs after the step (warm: %v)", warmDecision.Seconds(), warmServing.Seconds(), warm)
	e.deleteFleet()

	t.Logf("autoscale: decision_s=%.3f new_capacity_serving_s=%.3f warm_pool_serving_s=%.3f", decision.Seconds(), newCapacity.Seconds(), warmServing.Seconds())
}

// scaleIn runs a trickle of requests, well under the target, until the fleet is back to one
// instance, and fails if a request of the trickle failed: instances leave by draining.
func (e *env) scaleIn() {
	e.t.Helper()
	l := startRateLoad(fmt.Sprintf("http://127.0.0.1:%d/", e.lbPort), 5)
	start := time.Now()
	e.waitFor(2*time.Minute, 250*time.Millisecond, func() string {
		d, n := e.desired(), len(e.instances())
		if d != 1 || n != 1 {
			return fmt.Sprintf("desired %d with %d instances after the load dropped, want 1 and 1", d, n)
		}
		return ""
	})
	failed, answered := l.finish()
	e.t.Logf("scale-in: back to 1 instance %.1fs after the load dropped; %d of the trickle's requests answered, %d failed", time.Since(start).Seconds(), answered, failed)
	if failed > 0 {
		e.t.Fatalf("%d requests failed while the fleet scaled in", failed)
	}
	if answered == 0 {
		e.t.Fatal("no request of the trickle was answered")
	}
}

// TestIntegrationScaleToZero serves a request through a fleet of real instances with min 0, lets
// the fleet idle until it has no instance at all, then sends another GET through the load
// balancer: the load balancer must hold it while a new instance boots, and it must be answered 200
// by that instance, not refused.
func TestIntegrationScaleToZero(t *testing.T) {
	e := startHelloEnv(t)

	e.apply(autoscaleSpec{min: 0, max: 2, desired: 1, window: 10 * time.Second})
	// The listener opens once the controller has configured the load balancer, just after apply.
	e.waitFor(30*time.Second, 50*time.Millisecond, func() string {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", e.lbPort), time.Second)
		if err != nil {
			return "load balancer listener: " + err.Error()
		}
		c.Close()
		return ""
	})
	first, took := e.getThroughLB()
	t.Logf("first request answered 200 by %s after %.1fs", first, took.Seconds())
	e.waitFor(2*time.Minute, 250*time.Millisecond, func() string {
		if d, n := e.desired(), len(e.instances()); d != 0 || n != 0 {
			return fmt.Sprintf("desired %d with %d instances while idle, want 0 and none", d, n)
		}
		return ""
	})
	e.mu.Lock()
	existed := maps.Clone(e.created)
	e.mu.Unlock()

	again, took := e.getThroughLB()
	if existed[again] {
		t.Fatalf("answered by %s, an instance from before the fleet went to zero", again)
	}
	t.Logf("scale from zero: the first request after idling was answered 200 by %s after %.1fs", again, took.Seconds())
	e.deleteFleet()
}

// getThroughLB sends one GET through the load balancer, waiting as long as an instance may take
// to boot, and returns the instance that answered 200 and how long it took; anything else fails.
func (e *env) getThroughLB() (instance string, took time.Duration) {
	e.t.Helper()
	client := &http.Client{Timeout: bootLimit}
	start := time.Now()
	r := get(client, fmt.Sprintf("http://127.0.0.1:%d/", e.lbPort))
	took = r.at.Sub(start)
	if r.err != nil {
		e.t.Fatalf("GET through the load balancer: %v after %s, want 200 from an instance", r.err, took)
	}
	return r.instance, took
}
