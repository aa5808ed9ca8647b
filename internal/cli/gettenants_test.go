package cli

import (
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
)

func TestTenantRows(t *testing.T) {
	f := &v1alpha1.Fleet{Spec: v1alpha1.FleetSpec{Tenancy: &v1alpha1.Tenancy{Key: "host", Tenants: []string{"a", "c"}}}}
	f.Requests.TenantPins = map[string]v1alpha1.TenantPin{"b": {Ref: "hello:v1"}}
	inst := func(name, tenant, rev string, phase v1alpha1.InstancePhase, warm bool) v1alpha1.Instance {
		in := v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name, Labels: map[string]string{}}, Spec: v1alpha1.InstanceSpec{Revision: rev}, Status: v1alpha1.InstanceStatus{Phase: phase}}
		if tenant != "" {
			in.Metadata.Labels[v1alpha1.LabelTenant] = tenant
		}
		if warm {
			in.Metadata.Labels[controller.LabelWarm] = "true"
		}
		return in
	}
	rows := tenantRows(f, []v1alpha1.Instance{
		inst("i1", "a", "r1", v1alpha1.PhaseReady, false),
		inst("i2", "a", "r2", v1alpha1.PhaseBooting, false),
		inst("i3", "b", "r1", v1alpha1.PhaseReady, false),
		inst("i4", "b", "r1", v1alpha1.PhaseTerminating, false),
		inst("i5", "", "r2", v1alpha1.PhaseReady, true),
	})
	var b strings.Builder
	if err := printTenants(&b, rows); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"TENANT INSTANCES READY REVISIONS PINNED DECLARED",
		"(warm) 1 1 r2 - false",
		"a 2 1 r1,r2 - true",
		"b 1 1 r1 hello:v1 false",
		"c 0 0 <none> - true",
	}
	got := strings.Split(strings.TrimSpace(b.String()), "\n")
	for i := range got {
		got[i] = strings.Join(strings.Fields(got[i]), " ")
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
