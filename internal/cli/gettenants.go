package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
)

// TenantRow is one tenant of a fleet with tenancy, as herd get tenants prints it.
type TenantRow struct {
	Tenant string `json:"tenant"`
	// Instances counts the tenant's instances that are not terminating; Ready those that serve.
	Instances int `json:"instances"`
	Ready     int `json:"ready"`
	// Revisions are the revisions its instances run.
	Revisions []string `json:"revisions,omitempty"`
	// Pinned is the image the tenant is pinned to (herd rollout pin), "" when it follows the fleet.
	Pinned string `json:"pinned,omitempty"`
	// Declared is true for a tenant of spec.tenancy.tenants.
	Declared bool `json:"declared"`
}

// tenantRows sums up a fleet's instances per tenant: every declared tenant, every tenant with
// instances, and the warm pool as tenant "(warm)".
func tenantRows(f *v1alpha1.Fleet, insts []v1alpha1.Instance) []TenantRow {
	rows := map[string]*TenantRow{}
	row := func(t string) *TenantRow {
		if rows[t] == nil {
			rows[t] = &TenantRow{Tenant: t}
		}
		return rows[t]
	}
	if tn := f.Spec.Tenancy; tn != nil {
		for _, t := range tn.Tenants {
			row(t).Declared = true
		}
	}
	for t, pin := range f.Requests.TenantPins {
		row(t).Pinned = pin.Ref
	}
	for i := range insts {
		in := &insts[i]
		if in.Status.Phase == v1alpha1.PhaseTerminating {
			continue
		}
		t := controller.TenantOf(in)
		switch {
		case t == "" && controller.IsWarm(in):
			t = "(warm)"
		case t == "":
			continue
		}
		r := row(t)
		r.Instances++
		if in.Status.Phase == v1alpha1.PhaseReady {
			r.Ready++
		}
		if !slices.Contains(r.Revisions, in.Spec.Revision) {
			r.Revisions = append(r.Revisions, in.Spec.Revision)
		}
	}
	out := make([]TenantRow, 0, len(rows))
	for _, r := range rows {
		sort.Strings(r.Revisions)
		out = append(out, *r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Tenant < out[j].Tenant })
	return out
}

// getTenants prints the tenants of the fleet args[0].
func getTenants(ctx context.Context, g *globals, args []string, output string) error {
	if len(args) != 1 {
		return fmt.Errorf("name a fleet with spec.tenancy: herd get tenants FLEET")
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	f, err := c.GetFleet(ctx, args[0])
	if err != nil {
		return err
	}
	if f.Spec.Tenancy == nil {
		return fmt.Errorf("fleet %s has no spec.tenancy: it has no tenants", f.Metadata.Name)
	}
	insts, err := c.ListInstances(ctx, f.Metadata.Name)
	if err != nil {
		return err
	}
	rows := tenantRows(f, insts)
	format := outputFormat(output)
	if err := format.check(); err != nil {
		return err
	}
	if format == "yaml" || format == "json" {
		return printObject(g.out, format, rows)
	}
	return printTenants(g.out, rows)
}

func printTenants(w io.Writer, rows []TenantRow) error {
	t := newTable(w, "TENANT", "INSTANCES", "READY", "REVISIONS", "PINNED", "DECLARED")
	for _, r := range rows {
		t.row(r.Tenant, r.Instances, r.Ready, strings.Join(r.Revisions, ","), orNone(r.Pinned), r.Declared)
	}
	return t.flush()
}

func orNone(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// describeTenants lists a tenancy fleet's tenants in herd describe fleet.
func describeTenants(w io.Writer, f *v1alpha1.Fleet, insts []v1alpha1.Instance) {
	tn := f.Spec.Tenancy
	if tn == nil {
		return
	}
	fmt.Fprintf(w, "%-20s%s, %d-%d instances per tenant, idle after %s, warm pool %d, open %t\n", "Tenancy:",
		tn.Key, deref(tn.InstancesPerTenant.Min), deref(tn.InstancesPerTenant.Max), tn.IdleAfter.Duration, deref(tn.WarmPool), tn.Open)
	fmt.Fprintln(w, "Tenants:")
	_ = printTenants(newIndent(w), tenantRows(f, insts))
}
