//go:build tenancy

// The tenancy scenario boots about ten real instances one after another and takes minutes on 2
// cores, so make test leaves it out (its fake-provider and load balancer tests are in
// internal/controller and internal/lb): make test-tenancy and make bench-tenants run it, with
// -tags tenancy.

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agent/cgroups"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

const tenancyFleet = "saas"

// The isolation figure's setting: each tenant's bounds at the load balancer, and the CPU share the
// flood's clients may take of this machine.
const (
	tenantMaxInFlight = 4
	tenantRate        = 1000
	floodCPUs         = 0.5
	// isolationCycles pairs of 1 s slices, 0.9 s of each counted: about 3,600 of b's answers on
	// each side, so that a p99 is its 36th slowest answer.
	isolationCycles = 40
)

// tenancyScenario is a herd up serving one tenancy fleet of hello with tenants a, b and c.
type tenancyScenario struct {
	*env
	url  string
	mu   sync.Mutex
	owns map[string]string // instance -> the tenant its record named, as seen by any poll
}

// tenants returns the fleet's instances by tenant ("warm" for the pool) and records which tenant
// each instance served.
func (s *tenancyScenario) tenants() map[string][]v1alpha1.Instance {
	out := map[string][]v1alpha1.Instance{}
	for _, in := range s.instances() {
		if in.Status.Phase == v1alpha1.PhaseTerminating {
			continue
		}
		t := controller.TenantOf(&in)
		if t != "" {
			s.mu.Lock()
			s.owns[in.Metadata.Name] = t
			s.mu.Unlock()
		}
		if t == "" && controller.IsWarm(&in) {
			t = "warm"
		}
		out[t] = append(out[t], in)
	}
	return out
}

// settle waits until a tenant or the pool has exactly one instance, Ready, of revision rev (any
// when ""), for each of want, and returns them by tenant.
func (s *tenancyScenario) settle(rev string, want ...string) map[string]v1alpha1.Instance {
	s.t.Helper()
	var got map[string]v1alpha1.Instance
	s.waitFor(bootLimit, 500*time.Millisecond, func() string {
		by := s.tenants()
		got = map[string]v1alpha1.Instance{}
		var have []string
		for t, ins := range by {
			for _, in := range ins {
				have = append(have, fmt.Sprintf("%s=%s %s@%s", t, in.Metadata.Name, in.Status.Phase, in.Spec.Revision))
			}
		}
		sort.Strings(have)
		for _, t := range want {
			ins := by[t]
			if len(ins) != 1 || ins[0].Status.Phase != v1alpha1.PhaseReady || (rev != "" && ins[0].Spec.Revision != rev) {
				return fmt.Sprintf("want one Ready instance of %s for each of %v, have: %s", orAny(rev), want, strings.Join(have, ", "))
			}
			got[t] = ins[0]
		}
		if len(by) != len(want) {
			return fmt.Sprintf("want instances of %v only, have: %s", want, strings.Join(have, ", "))
		}
		return ""
	})
	return got
}

func orAny(rev string) string {
	if rev == "" {
		return "any revision"
	}
	return rev
}

// first sends a tenant's first request and returns the instance that answered and how long it took.
func (s *tenancyScenario) first(tenant string) (string, time.Duration) {
	s.t.Helper()
	start := time.Now()
	r := get(tenantClient(tenant, time.Minute), s.url)
	took := time.Since(start)
	if r.err != nil {
		s.t.Fatalf("tenant %s's first request: %v", tenant, r.err)
	}
	return r.instance, took
}

// crossAnswers counts the answers of a tenant's load that came from an instance that was not
// the tenant's.
func (s *tenancyScenario) crossAnswers(tenant string, rs []result) (cross, failed int, wrong []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range rs {
		switch {
		case r.err != nil:
			failed++
		case s.owns[r.instance] != tenant:
			cross++
			wrong = append(wrong, fmt.Sprintf("%s (tenant %q)", r.instance, s.owns[r.instance]))
		}
	}
	return cross, failed, wrong
}

// clientConfig is the client config herd up wrote.
func (s *tenancyScenario) clientConfig() *client.Config {
	s.t.Helper()
	cfg, err := client.LoadConfig(filepath.Join(s.dir, "config"))
	if err != nil {
		s.t.Fatal(err)
	}
	return cfg
}

// checkEqualCPUWeights checks that the tenants' instances each have a cgroup of their own with
// the same CPU weight (v1 cpu.shares, v2 cpu.weight), so that neither can take the other's share
// of the CPUs when both want them.
func (s *tenancyScenario) checkEqualCPUWeights(tenants ...string) {
	s.t.Helper()
	hs, err := cgroups.Hierarchies()
	if err != nil {
		s.t.Fatal(err)
	}
	by := s.tenants()
	var seen []string
	var first string
	for _, tenant := range tenants {
		if len(by[tenant]) == 0 {
			s.t.Fatalf("tenant %s has no instance", tenant)
		}
		_, _, root := local.HostNames(by[tenant][0].Metadata.Name)
		weight := ""
		for _, h := range hs {
			for _, f := range []string{"cpu.shares", "cpu.weight"} {
				if b, err := os.ReadFile(filepath.Join(h.Path(root), f)); err == nil {
					weight = f + "=" + strings.TrimSpace(string(b))
				}
			}
		}
		if weight == "" {
			s.t.Errorf("tenant %s's instance has no CPU weight in its cgroup %s", tenant, root)
		}
		if first == "" {
			first = weight
		} else if weight != first {
			s.t.Errorf("the tenants' instances have different CPU weights: %s", strings.Join(append(seen, tenant+": "+weight), ", "))
		}
		seen = append(seen, fmt.Sprintf("%s: %s %s", tenant, root, weight))
	}
	s.t.Logf("CPU weights: %s", strings.Join(seen, ", "))
}

func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// TestIntegrationTenancy runs a fleet of hello with tenancy on real instances: a new tenant's
// first request is answered by the warm pool's booted instance, an unknown tenant gets 404, a
// tenant flooded is held to its bounds at the load balancer while another is not, the two
// instances have the same CPU weight, and each tenant's answers come only from its own
// instances, checked on every answer's instance, during a rolling update and while one tenant's
// instance is killed and replaced. Its figures line (make bench-tenants):
//
//	tenancy: cold_first_answer_ms=<float> cross_tenant_answers=<int> isolation_p99_ratio=<float>
func TestIntegrationTenancy(t *testing.T) {
	e := newEnv(t, withHello, buildingVariant("hello-v2", "REVISION", "v2"))
	before := localtest.Take(t)
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	e.startUp()
	e.lbPort = freeport.TCP(t)
	s := &tenancyScenario{env: e, url: fmt.Sprintf("http://127.0.0.1:%d/", e.lbPort), owns: map[string]string{}}
	spec := `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: %s
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1, gracePeriod: %s}
  rollout: {strategy: Rolling, maxSurge: 1, maxUnavailable: 0}
  tenancy: {key: "header:X-Tenant", tenants: [a, b, c], warmPool: 1, maxInFlight: %d, requestsPerSecond: %d}
  regions: [{name: local, provider: local}]
`
	apply := func(image string) {
		e.applyFleet(fmt.Appendf(nil, spec, tenancyFleet, image, e.lbPort, helloPort, helloPort, rolloutGrace, tenantMaxInFlight, tenantRate))
	}
	apply("hello")
	warm := s.settle("", "warm")["warm"].Metadata.Name

	// A new tenant's first request: the warm instance takes it, the request held meanwhile.
	got, cold := s.first("a")
	if got != warm {
		t.Fatalf("tenant a's first request was answered by %s, not the warm instance %s", got, warm)
	}
	t.Logf("tenant a's first request answered in %.1f ms by the warm instance %s", ms(cold), warm)
	warm = s.settle("", "a", "warm")["warm"].Metadata.Name
	if got, _ := s.first("b"); got != warm {
		t.Fatalf("tenant b's first request was answered by %s, not the warm instance %s", got, warm)
	}
	rev1 := s.settle("", "a", "b", "warm")["a"].Spec.Revision

	// An unknown tenant is refused with a body that says why.
	resp, err := tenantClient("mallory", 5*time.Second).Get(s.url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `unknown tenant "mallory"`) {
		t.Fatalf("unknown tenant: %d %q, want 404 naming the tenant", resp.StatusCode, body)
	}

	// Isolation: b's latency with a flooded, against b's without the flood, from one run in
	// which the flood takes turns of a second (isolation_test.go): the machine's other work moves
	// b's p99 from one second to the next, and so falls on both sides. The flood's clients run in
	// a process of their own, capped to half a CPU (flood_test.go): a tenant's clients are on
	// other machines, and uncapped on this one they would take the CPUs from herd and b alike.
	aQueued := func() float64 {
		v, _ := strconv.ParseFloat(scrapeOne(t, s.clientConfig(), `herd_lb_tenant_queued_total{fleet="saas",tenant="a"}`), 64)
		return v
	}
	queuedBefore := aQueued()
	iso := measureIsolation(t, s.url, 16, floodCPUs, isolationCycles, time.Second, 100*time.Millisecond, func() {
		e.waitFor(time.Minute, 100*time.Millisecond, func() string {
			if aQueued() <= queuedBefore {
				return "tenant a's flood has not reached its bounds at the load balancer"
			}
			return ""
		})
	})
	ratio := iso.ratio()
	bFailed := iso.failed
	t.Logf("isolation, %d pairs of 1 s slices with and without tenant a flooded by 16 unpaced clients capped to %.1f CPU, in random order: %s",
		isolationCycles, floodCPUs, iso)
	if bFailed > 0 {
		t.Errorf("%d of tenant b's requests failed while tenant a was flooded: b is not held to a's bounds", bFailed)
	}
	if got := scrapeOne(t, s.clientConfig(), `herd_lb_tenant_queued_total{fleet="saas",tenant="a"}`); got == "" {
		t.Errorf("tenant a's flood was never held to its bounds (no herd_lb_tenant_queued_total for a)")
	}
	if got := scrapeOne(t, s.clientConfig(), `herd_lb_tenant_queued_total{fleet="saas",tenant="b"}`); got != "" {
		t.Errorf("tenant b was held to a bound (herd_lb_tenant_queued_total %s) at 100 requests/s", got)
	}
	s.checkEqualCPUWeights("a", "b")

	// Steady load on both tenants through a rolling update and a kill.
	loads := map[string]*load{}
	for _, tenant := range []string{"a", "b"} {
		loads[tenant] = startLoadWith(func() *http.Client { return tenantClient(tenant, 5*time.Second) }, s.url, paceClients/2, pace, 8*time.Minute)
	}
	defer func() {
		for _, l := range loads {
			l.finish()
		}
	}()
	apply("hello-v2")
	var rev2 string
	e.waitFor(time.Minute, 250*time.Millisecond, func() string {
		f := e.fleet(tenancyFleet)
		if f == nil || f.Status.CurrentRevision == rev1 || f.Status.CurrentRevision == "" {
			return "the fleet's revision has not moved from " + rev1
		}
		rev2 = f.Status.CurrentRevision
		return ""
	})
	after := s.settle(rev2, "a", "b", "warm")
	for _, tenant := range []string{"a", "b"} {
		name := after[tenant].Metadata.Name
		e.waitAnswers(loads[tenant], 20, func(instance string) bool { return instance == name })
	}
	t.Logf("rolled out %s to every tenant", rev2)

	victim := after["a"].Metadata.Name
	killInstance(t, victim)
	e.waitFor(2*time.Minute, 250*time.Millisecond, func() string {
		for _, in := range s.tenants()["a"] {
			if in.Metadata.Name == victim {
				return fmt.Sprintf("the killed instance %s is still tenant a's, %s", victim, in.Status.Phase)
			}
		}
		return ""
	})
	replaced := s.settle(rev2, "a", "b", "warm")
	e.waitAnswers(loads["a"], 20, func(instance string) bool { return instance == replaced["a"].Metadata.Name })
	t.Logf("tenant a's killed instance %s replaced by %s", victim, replaced["a"].Metadata.Name)

	crossTotal := 0
	for _, tenant := range []string{"a", "b"} {
		rs := loads[tenant].finish()
		s.tenants() // the owners of the last instances
		cross, failed, wrong := s.crossAnswers(tenant, rs)
		crossTotal += cross
		t.Logf("tenant %s: %d answers, %d failed, %d from another tenant's instance", tenant, len(rs)-failed, failed, cross)
		if cross > 0 {
			t.Errorf("tenant %s was answered by instances not its own: %s", tenant, strings.Join(wrong[:min(len(wrong), 10)], ", "))
		}
	}
	t.Logf("tenancy: cold_first_answer_ms=%.1f cross_tenant_answers=%d isolation_p99_ratio=%.2f", ms(cold), crossTotal, ratio)
}
