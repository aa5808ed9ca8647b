package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
	"herd.dev/herd/internal/provider/local/regiontest"
)

const (
	regionsFleet = "regions"
	// nearRegion is 10 ms from the internet, farRegion 60 ms: nearRegion is partitioned and is
	// the first of the canary's wave.
	nearRegion, farRegion   = "eu", "us"
	nearLatency, farLatency = 10 * time.Millisecond, 60 * time.Millisecond
	usersNet                = "users"
	// regionsGrace is the instances' boot grace period: four instances boot at once.
	regionsGrace = 90 * time.Second
)

// regionsScenario is a herd up serving one fleet of hello in two regions, each with its own
// load balancer, and a client network on the internet.
type regionsScenario struct {
	*env
	spec  string // the fleet's YAML, with %s for the image
	users string // the client network's namespace
	lbs   map[string]string
}

// regionLBRow is a row of `herd get regions -o json`, as much as the test reads.
type regionLBRow struct {
	Fleet   string `json:"fleet"`
	Name    string `json:"name"`
	LB      string `json:"lb"`
	LBState string `json:"lbState"`
	Phase   string `json:"phase"`
}

func (s *regionsScenario) regionRows() []regionLBRow {
	out, err := s.herd("get", "regions", regionsFleet, "-o", "json")
	if err != nil {
		return nil
	}
	var rows []regionLBRow
	if json.Unmarshal([]byte(out), &rows) != nil {
		return nil
	}
	return rows
}

// waitLBsSynced waits until both regions' load balancers run the store's configuration, and
// records their data addresses.
func (s *regionsScenario) waitLBsSynced(timeout time.Duration) {
	s.t.Helper()
	s.waitFor(timeout, 250*time.Millisecond, func() string {
		rows := s.regionRows()
		synced := map[string]string{}
		for _, r := range rows {
			if r.LBState == "Synced" && net.ParseIP(r.LB) != nil {
				synced[r.Name] = r.LB
			}
		}
		if len(synced) != 2 {
			return fmt.Sprintf("regional load balancers not synced: %+v", rows)
		}
		s.lbs = synced
		return ""
	})
}

// url is the fleet's listener on a region's load balancer.
func (s *regionsScenario) url(region string) string {
	return "http://" + net.JoinHostPort(s.lbs[region], strconv.Itoa(s.lbPort)) + "/"
}

// loadOn runs n paced clients in the users' network against a region's load balancer.
func (s *regionsScenario) loadOn(region string, n int, limit time.Duration) *load {
	return startLoadWith(func() *http.Client { return regiontest.HTTPClient(s.users, 5*time.Second) }, s.url(region), n, pace, limit)
}

// regionInstances returns the names of the fleet's instances in a region, and records every
// name for the leak check.
func (s *regionsScenario) regionInstances(region string) []string {
	var out []string
	for _, in := range s.instances() {
		if in.Spec.Region == region {
			out = append(out, in.Metadata.Name)
		}
	}
	sort.Strings(out)
	return out
}

// connectMedian is the median time of n TCP connects from the users' network to address.
func connectMedian(t *testing.T, ns, address string, n int) time.Duration {
	took := regiontest.ConnectTimes(t, ns, address, n)
	return took[len(took)/2]
}

// failures counts the failed results in [from, to], logging the first few.
func failures(t *testing.T, what string, rs []result, from, to time.Time) (failed, total int) {
	for _, r := range rs {
		if r.at.Before(from) || r.at.After(to) {
			continue
		}
		total++
		if r.err != nil {
			failed++
			if failed <= 5 {
				t.Logf("%s: failed request at %+dms: %v", what, r.at.Sub(from).Milliseconds(), r.err)
			}
		}
	}
	return failed, total
}

func startRegionsScenario(t *testing.T) *regionsScenario {
	e := newEnv(t, withHello, buildingVariant("hello-bad", "FAIL_PERCENT", "50"))
	before := localtest.Take(t)
	e.regions = []string{nearRegion, farRegion}
	e.clientNets = []string{usersNet}
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	e.startUp()
	e.lbPort = freeport.TCP(t)
	s := &regionsScenario{env: e}
	s.spec = fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: %%s
  replicas: {min: 1, max: 10, desired: 2}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1, gracePeriod: %s}
  rollout: {strategy: Canary, steps: [{weight: 50, pause: 30s}, {weight: 100}], analysis: {minRequests: 20}}
  regions:
  - {name: %s, provider: local, options: {latency: %s}}
  - {name: %s, provider: local, options: {latency: %s}}
`, regionsFleet, e.lbPort, helloPort, helloPort, regionsGrace, nearRegion, nearLatency, farRegion, farLatency)
	// Runs before e.cleanup: the test's client network goes, then the fleet (and with its last
	// instances the regions' networks), then herd up.
	localtest.CleanupOnInterrupt(t, func() {
		p, err := local.New(local.Options{DataDir: e.data, HerdBinary: e.bin})
		if err == nil {
			err = p.Lab().RemoveClient(context.Background(), usersNet)
		}
		if err != nil {
			t.Errorf("remove client network %s: %v", usersNet, err)
		}
	})
	start := time.Now()
	s.applyFleet(fmt.Appendf(nil, s.spec, "hello"))
	s.waitServing(4)
	t.Logf("4 instances in 2 regions serving %.1f s after the apply", time.Since(start).Seconds())
	s.waitLBsSynced(time.Minute)
	p, err := local.New(local.Options{DataDir: e.data, HerdBinary: e.bin})
	if err != nil {
		t.Fatal(err)
	}
	c, err := p.Lab().AddClient(context.Background(), usersNet, netlab.Shape{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.users = c.Netns
	t.Cleanup(func() {
		if t.Failed() {
			s.regionLogs(t)
		}
	})
	return s
}

// TestIntegrationRegions runs a fleet of hello in two regions 10 ms and 60 ms away, each behind
// its own load balancer, with real clients on the internet: the clients measure the regions'
// distance; a partition of one region under load costs the other region nothing and leaves the
// partitioned instances in place; herd up killed -9 under load costs neither region a request,
// and a new herd up adopts everything; a canary of a bad revision rolled out in a wave is rolled
// back in the first region and never reaches the second. Its figures line is make
// bench-regions'.
func TestIntegrationRegions(t *testing.T) {
	s := startRegionsScenario(t)
	var partitionFailed, cpDownFailed int
	var detect time.Duration
	waveStopped := false
	defer func() {
		t.Logf("regions: partition_failed_requests=%d detect_unreachable_s=%.2f cp_down_failed_requests=%d wave_stopped=%t",
			partitionFailed, detect.Seconds(), cpDownFailed, waveStopped)
	}()

	// Each step is a subtest on the same fleet; the env's waits fail the subtest that runs.
	run := func(name string, step func(t *testing.T)) { s.subtest(t, name, step) }
	run("distance", s.distance)
	run("partition", func(t *testing.T) { partitionFailed, detect = s.partition(t) })
	run("control-plane-down", func(t *testing.T) { cpDownFailed = s.controlPlaneDown(t) })
	run("canary-wave", func(t *testing.T) { waveStopped = s.canaryWave(t) })
}

// distance: a client in the users' network reaches each region's load balancer; the
// difference of their TCP connect times is the difference of the regions' latencies.
func (s *regionsScenario) distance(t *testing.T) {
	for _, region := range []string{nearRegion, farRegion} {
		resp, err := regiontest.HTTPClient(s.users, 5*time.Second).Get(s.url(region))
		if err != nil {
			t.Fatalf("GET %s from the users' network: %v", s.url(region), err)
		}
		in, err := helloInstance(resp)
		if err != nil {
			t.Fatalf("GET %s: %v", s.url(region), err)
		}
		if got := s.regionOf(in); got != region {
			t.Errorf("region %s's load balancer answered from instance %s of region %q", region, in, got)
		}
	}
	addr := func(region string) string { return net.JoinHostPort(s.lbs[region], strconv.Itoa(s.lbPort)) }
	near := connectMedian(t, s.users, addr(nearRegion), 21)
	far := connectMedian(t, s.users, addr(farRegion), 21)
	diff, want := far-near, farLatency-nearLatency
	t.Logf("TCP connect from the users' network (median of 21): region %s %.2f ms, region %s %.2f ms: %.2f ms apart, configured %s",
		nearRegion, ms(near), farRegion, ms(far), ms(diff), want)
	if d := diff - want; d < -want/5 || d > want/5 {
		t.Errorf("the regions are %.2f ms apart for a client, want %s within 20%%", ms(diff), want)
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// regionOf is the region of a named instance, "" when unknown.
func (s *regionsScenario) regionOf(name string) string {
	for _, in := range s.instances() {
		if in.Metadata.Name == name {
			return in.Spec.Region
		}
	}
	return ""
}

// regionPhase is the phase status.regions gives a region of the fleet.
func (s *regionsScenario) regionPhase(region string) string {
	f := s.fleet(regionsFleet)
	if f == nil {
		return ""
	}
	if rs := f.Status.RegionStatusOf(region); rs != nil {
		return rs.Phase
	}
	return ""
}

// partition cuts the near region's link under steady load on the far region's load balancer,
// and returns the far region's failed requests and how long status took to call the near region
// unreachable.
func (s *regionsScenario) partition(t *testing.T) (failed int, detect time.Duration) {
	before := s.regionInstances(nearRegion)
	l := s.loadOn(farRegion, paceClients, 2*time.Minute)
	defer l.finish()
	s.waitFor(30*time.Second, 50*time.Millisecond, func() string {
		if n := len(l.since(0)); n < 100 {
			return fmt.Sprintf("%d answers from region %s before the partition", n, farRegion)
		}
		return ""
	})
	const cut = 20 * time.Second
	start := time.Now()
	if out, err := s.herd("chaos", "partition-region", nearRegion, "--duration", cut.String()); err != nil {
		t.Fatalf("herd chaos partition-region: %v\n%s", err, out)
	}
	applied := time.Now()
	s.waitFor(30*time.Second, 20*time.Millisecond, func() string {
		if p := s.regionPhase(nearRegion); p != v1alpha1.RegionUnreachable {
			return fmt.Sprintf("region %s is %q, want %s", nearRegion, p, v1alpha1.RegionUnreachable)
		}
		return ""
	})
	detect = time.Since(applied)
	t.Logf("region %s Unreachable in status %.2f s after the partition was applied (%.2f s after herd chaos started)",
		nearRegion, detect.Seconds(), time.Since(start).Seconds())
	if _, err := regiontest.HTTPClient(s.users, 2*time.Second).Get(s.url(nearRegion)); err == nil {
		t.Errorf("region %s's load balancer answered a client through the partition", nearRegion)
	}
	// The partition ends by itself; the region comes back with the instances it had.
	s.waitFor(cut+30*time.Second, 250*time.Millisecond, func() string {
		if after := s.regionInstances(nearRegion); !slices.Equal(after, before) {
			t.Errorf("region %s's instances changed under the partition: %v, were %v", nearRegion, after, before)
			before = after
		}
		if p := s.regionPhase(nearRegion); p != v1alpha1.RegionReady {
			return fmt.Sprintf("region %s is %q after the partition, want Ready", nearRegion, p)
		}
		return ""
	})
	back := time.Now()
	t.Logf("region %s Ready again %.1f s after the partition started (duration %s)", nearRegion, back.Sub(applied).Seconds(), cut)
	if after := s.regionInstances(nearRegion); !slices.Equal(after, before) {
		t.Errorf("region %s has instances %v after the partition, want the same %v: a partition is not a death", nearRegion, after, before)
	}
	rs := l.finish()
	failed, total := failures(t, "region "+farRegion, rs, start, back)
	t.Logf("region %s under the partition of %s: %d of %d requests failed", farRegion, nearRegion, failed, total)
	if failed != 0 {
		t.Errorf("%d of %d requests to region %s failed while region %s was partitioned, want 0", failed, total, farRegion, nearRegion)
	}
	return failed, detect
}

// controlPlaneDown kills -9 herd up under load on both regions' load balancers, keeps the load
// on for 30 s, then starts a new herd up and waits until it has adopted the instances and the
// load balancers. It returns the failed requests from the kill until then.
func (s *regionsScenario) controlPlaneDown(t *testing.T) int {
	before := append(s.regionInstances(nearRegion), s.regionInstances(farRegion)...)
	loads := map[string]*load{nearRegion: s.loadOn(nearRegion, paceClients/2, 3*time.Minute), farRegion: s.loadOn(farRegion, paceClients/2, 3*time.Minute)}
	defer func() {
		for _, l := range loads {
			l.finish()
		}
	}()
	s.waitFor(30*time.Second, 50*time.Millisecond, func() string {
		for region, l := range loads {
			if n := len(l.since(0)); n < 50 {
				return fmt.Sprintf("%d answers from region %s before the kill", n, region)
			}
		}
		return ""
	})
	killed := time.Now()
	if err := s.up.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-s.upDone
	// herd up is down: the regional load balancers serve on their own for 30 s.
	time.Sleep(30 * time.Second)
	down := time.Now()
	failed := 0
	for region, l := range loads {
		f, n := failures(t, "region "+region, l.since(0), killed, down)
		t.Logf("region %s with herd up down for 30 s: %d of %d requests failed", region, f, n)
		if n == 0 {
			t.Errorf("region %s answered no request while herd up was down", region)
		}
		failed += f
	}

	// A new herd up: it adopts the instances and the load balancers, and confirms their
	// configuration, under the same load.
	s.upLog = filepath.Join(s.dir, "up2.log")
	started := time.Now()
	s.startUp()
	s.waitFor(2*time.Minute, 250*time.Millisecond, func() string {
		cfg, err := client.LoadConfig(filepath.Join(s.dir, "config"))
		if err != nil {
			return err.Error()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		st, err := client.New(cfg).Status(ctx)
		if err != nil || st["controller"] != "synced" {
			return fmt.Sprintf("the new herd up's controller is not synced: %v %v", st, err)
		}
		return ""
	})
	s.waitLBsSynced(time.Minute)
	resynced := time.Since(started)
	// Some more load on the adopted load balancers, then the count.
	time.Sleep(5 * time.Second)
	end := time.Now()
	after := append(s.regionInstances(nearRegion), s.regionInstances(farRegion)...)
	if !slices.Equal(after, before) {
		t.Errorf("instances after the new herd up: %v, want the same %v (adopted)", after, before)
	}
	total := 0
	failed = 0
	for region, l := range loads {
		f, n := failures(t, "region "+region, l.since(0), killed, end)
		failed += f
		total += n
	}
	t.Logf("new herd up synced its controller and both regional load balancers %.1f s after it started; %d of %d requests failed from the kill to %.0f s after",
		resynced.Seconds(), failed, total, end.Sub(killed).Seconds())
	if failed != 0 {
		t.Errorf("%d of %d requests failed from the kill -9 of herd up through the new one's re-sync, want 0", failed, total)
	}
	return failed
}

// canaryWave rolls hello-bad (50% of its answers are 500) out as a canary wave under load on
// the first region's load balancer: the analysis rolls it back there, and the second region
// never gets an instance of it. It reports whether the wave stopped so.
func (s *regionsScenario) canaryWave(t *testing.T) bool {
	f := s.fleet(regionsFleet)
	if f == nil {
		t.Fatal("herd get fleet failed")
	}
	stable := f.Status.CurrentRevision
	l := s.loadOn(nearRegion, paceClients, 5*time.Minute)
	defer l.finish()
	start := time.Now()
	s.applyFleet(fmt.Appendf(nil, s.spec, "hello-bad"))
	farRan := map[string]bool{} // instances of another revision than stable in the far region
	var bad string
	s.waitFor(5*time.Minute, 250*time.Millisecond, func() string {
		for _, in := range s.instances() {
			if in.Spec.Region == farRegion && in.Spec.Revision != stable {
				farRan[in.Metadata.Name] = true
			}
		}
		f = s.fleet(regionsFleet)
		if f == nil {
			return "herd get fleet failed"
		}
		ro := f.Status.Rollout
		if ro == nil || ro.Revision == stable {
			return "the rollout has not started"
		}
		bad = ro.Revision
		if ro.Phase != v1alpha1.RolloutRolledBack {
			return fmt.Sprintf("rollout %s: %s %s", ro.Revision, ro.Phase, ro.Message)
		}
		return ""
	})
	rolledBack := time.Since(start)
	t.Logf("canary %s rolled back %.1f s after the apply: %s", bad, rolledBack.Seconds(), f.Status.Rollout.Message)
	for _, rs := range f.Status.Regions {
		if rs.Rollout != nil {
			t.Logf("  region %s: %s %s (revision %s)", rs.Name, rs.Rollout.Phase, rs.Rollout.Message, rs.CurrentRevision)
		}
	}
	// The bad revision's instances go; the far region keeps the stable revision throughout.
	s.waitFor(time.Minute, 250*time.Millisecond, func() string {
		for _, in := range s.instances() {
			if in.Spec.Region == farRegion && in.Spec.Revision != stable {
				farRan[in.Metadata.Name] = true
			}
			if in.Spec.Revision == bad {
				return "instance " + in.Metadata.Name + " of " + bad + " still exists"
			}
		}
		return ""
	})
	if len(farRan) > 0 {
		t.Errorf("region %s ran instances of another revision than %s: %v", farRegion, stable, farRan)
	}
	if rs := f.Status.RegionStatusOf(farRegion); rs == nil || rs.CurrentRevision != stable {
		t.Errorf("region %s status %+v, want it on %s", farRegion, rs, stable)
	}
	if !strings.Contains(f.Status.Rollout.Message, "5xx") {
		t.Errorf("rollout message %q, want the canary's 5xx rate", f.Status.Rollout.Message)
	}
	rs := l.finish()
	failed, total := failures(t, "region "+nearRegion, rs, start, time.Now())
	t.Logf("region %s during the canary wave: %d of %d requests failed (the canary's step is 50%% of the region's traffic, half of its answers fail)",
		nearRegion, failed, total)
	return len(farRan) == 0
}

// For the logs of a failed run: the regions' load balancers' and relays' logs.
func (s *regionsScenario) regionLogs(t *testing.T) {
	logs, _ := filepath.Glob(filepath.Join(s.data, "providers", "local", "net", "*", "*", "*.log"))
	for _, l := range logs {
		data, _ := os.ReadFile(l)
		t.Logf("--- %s\n%s", l, tail(string(data), 30))
	}
}
