package controller

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

func tenancyFleet(image string, tenants ...string) *v1alpha1.Fleet {
	f := fleetSpec("saas", image, 0)
	f.Spec.Tenancy = &v1alpha1.Tenancy{Key: "header:X-Tenant", Tenants: tenants, IdleAfter: &v1alpha1.Duration{}}
	v1alpha1.SetFleetDefaults(f, "")
	return f
}

// tenancyState sums up a fleet's records as "tenant=instances@revision..." (warm instances under
// "warm"), and says what keeps it from having every record Ready and known to the provider.
func (e *env) tenancyState(fleet string) (byTenant map[string][]*v1alpha1.Instance, problem string) {
	recs, obs := e.records(fleet), e.observed(fleet)
	if len(recs) != len(obs) {
		return nil, fmt.Sprintf("%d records, %d provider instances", len(recs), len(obs))
	}
	byTenant = map[string][]*v1alpha1.Instance{}
	for _, r := range recs {
		if r.Status.Phase != v1alpha1.PhaseReady {
			return nil, fmt.Sprintf("%s is %s", r.Metadata.Name, r.Status.Phase)
		}
		k := TenantOf(r)
		if IsWarm(r) {
			k = "warm"
		}
		byTenant[k] = append(byTenant[k], r)
	}
	return byTenant, ""
}

func describeTenants(m map[string][]*v1alpha1.Instance) string {
	var parts []string
	for k, ins := range m {
		var names []string
		for _, in := range ins {
			names = append(names, in.Metadata.Name+"@"+in.Spec.Revision)
		}
		parts = append(parts, k+"="+strings.Join(names, ","))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// waitTenants waits until the fleet's Ready instances are, per tenant, as many as want says (of
// revision rev when set), and returns them.
func (e *env) waitTenants(fleet string, want map[string]int, rev string) map[string][]*v1alpha1.Instance {
	e.t.Helper()
	var got map[string][]*v1alpha1.Instance
	waitFor(e.t, 10*time.Second, func() string {
		var why string
		if got, why = e.tenancyState(fleet); why != "" {
			return why
		}
		for k, ins := range got {
			if len(ins) != want[k] {
				return "have " + describeTenants(got)
			}
			for _, in := range ins {
				if rev != "" && in.Spec.Revision != rev {
					return "have " + describeTenants(got) + ", want revision " + rev
				}
			}
		}
		for k, n := range want {
			if len(got[k]) != n {
				return "have " + describeTenants(got)
			}
		}
		return ""
	})
	return got
}

// A tenant claimed by the load balancer takes the warm instance (the same instance, relabelled),
// the pool is refilled, a killed instance of a tenant is replaced by one of that tenant, a rolling
// update replaces each tenant's instances with its own, a pinned tenant stays on its image, an
// unknown tenant gets nothing, and an idle tenant is scaled to zero.
func TestTenancy(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := tenancyFleet("img-1", "a", "b")
	rev1 := RevisionName(f)
	e.put(f)
	warm := e.waitTenants("saas", map[string]int{"warm": 1}, rev1)["warm"][0].Metadata.Name

	e.ctrl.ClaimTenant("saas", "a")
	got := e.waitTenants("saas", map[string]int{"a": 1, "warm": 1}, rev1)
	if got["a"][0].Metadata.Name != warm {
		t.Fatalf("tenant a got %s, want the warm instance %s", got["a"][0].Metadata.Name, warm)
	}

	e.ctrl.ClaimTenant("saas", "mallory") // not listed, not open
	e.ctrl.ClaimTenant("saas", "b")
	got = e.waitTenants("saas", map[string]int{"a": 1, "b": 1, "warm": 1}, rev1)

	victim := got["a"][0].Metadata.Name
	if err := e.fake.Kill(victim, "kernel panic"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() string {
		if e.exists("saas", victim) {
			return victim + " still there"
		}
		return ""
	})
	got = e.waitTenants("saas", map[string]int{"a": 1, "b": 1, "warm": 1}, rev1)

	// b stays on img-1 while the fleet moves to img-2.
	cur := e.fleet("saas")
	cur.Requests.TenantPins = map[string]v1alpha1.TenantPin{"b": {Ref: "img-1", Digest: "img-1"}}
	cur.Spec.Image = "img-2"
	e.put(cur)
	rev2 := RevisionName(cur)
	got = e.waitTenants("saas", map[string]int{"a": 1, "b": 1, "warm": 1}, "")
	waitFor(t, 10*time.Second, func() string {
		got, why := e.tenancyState("saas")
		if why != "" {
			return why
		}
		if len(got["a"]) != 1 || got["a"][0].Spec.Revision != rev2 || len(got["b"]) != 1 || got["b"][0].Spec.Revision != rev1 ||
			len(got["warm"]) != 1 || got["warm"][0].Spec.Revision != rev2 || len(got) != 3 {
			return "have " + describeTenants(got)
		}
		return ""
	})

	// Idle for 200ms (no activity source: the claim was the last sign of life): scaled to zero.
	cur = e.fleet("saas")
	cur.Spec.Tenancy.IdleAfter = &v1alpha1.Duration{Duration: 200 * time.Millisecond}
	e.put(cur)
	e.waitTenants("saas", map[string]int{"warm": 1}, rev2)
}

// A canary that is one customer: tenant b pinned to a new image is rolled to it alone while a and
// the warm pool stay on the fleet's, and unpinned it rolls back to the fleet's image.
func TestTenancyPinCanary(t *testing.T) {
	e := newEnv(t, nil, nil)
	f := tenancyFleet("img-1", "a", "b")
	rev1 := RevisionName(f)
	canary := *f
	canary.Spec.Image = "img-2"
	rev2 := RevisionName(&canary)
	e.put(f)
	e.waitTenants("saas", map[string]int{"warm": 1}, rev1)
	e.ctrl.ClaimTenant("saas", "a")
	e.waitTenants("saas", map[string]int{"a": 1, "warm": 1}, rev1)
	e.ctrl.ClaimTenant("saas", "b")
	before := e.waitTenants("saas", map[string]int{"a": 1, "b": 1, "warm": 1}, rev1)

	// As the API writes a pin: the requests only, the generation unchanged.
	pin := func(pins map[string]v1alpha1.TenantPin) {
		t.Helper()
		if _, err := store.UpdateFleetRequests(context.Background(), e.store, "saas", func(_ *v1alpha1.Fleet, r *v1alpha1.FleetRequests) (bool, error) {
			r.TenantPins = pins
			return true, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	pin(map[string]v1alpha1.TenantPin{"b": {Ref: "img-2", Digest: "img-2"}})
	waitFor(t, 10*time.Second, func() string {
		got, why := e.tenancyState("saas")
		if why != "" {
			return why
		}
		if len(got["a"]) != 1 || got["a"][0].Metadata.Name != before["a"][0].Metadata.Name || len(got["b"]) != 1 || got["b"][0].Spec.Revision != rev2 ||
			len(got["warm"]) != 1 || got["warm"][0].Spec.Revision != rev1 || len(got) != 3 {
			return "have " + describeTenants(got) + ", want b alone on " + rev2 + " and a's instance untouched"
		}
		if img := got["b"][0].Spec.Image; img != "img-2" {
			return "b's instance boots " + img + ", want img-2"
		}
		return ""
	})

	pin(nil)
	e.waitTenants("saas", map[string]int{"a": 1, "b": 1, "warm": 1}, rev1)
}
