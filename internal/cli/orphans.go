package cli

import (
	"context"
	"fmt"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// Orphans are instances a provider runs that no fleet owns (internal/controller's orphan
// collector): `herd get instances --orphans` lists them, `herd up --orphans` says what to do
// with them.

// Values of herd up's --orphans.
const (
	orphansDelete = "delete"
	orphansKeep   = "keep"
)

// keepOrphans reads herd up's --orphans.
func keepOrphans(v string) (bool, error) {
	switch v {
	case orphansDelete:
		return false, nil
	case orphansKeep:
		return true, nil
	}
	return false, fmt.Errorf("--orphans %q: give %s (delete instances no fleet owns once their grace period is over) or %s (only report them)", v, orphansDelete, orphansKeep)
}

// getOrphans prints the orphans the controller knows of, of one fleet label unless fleet is "",
// or the one named name.
func getOrphans(ctx context.Context, g *globals, format outputFormat, fleet, name string) error {
	c, err := g.client()
	if err != nil {
		return err
	}
	all, err := c.Orphans(ctx)
	if err != nil {
		return err
	}
	var out []v1alpha1.Orphan
	for _, o := range all {
		if (fleet == "" || o.Fleet == fleet) && (name == "" || o.Name == name) {
			out = append(out, o)
		}
	}
	if name != "" && len(out) == 0 {
		return fmt.Errorf("no orphan %q: herd get instances --orphans lists them", name)
	}
	if format == "yaml" || format == "json" {
		if out == nil {
			out = []v1alpha1.Orphan{}
		}
		return printObject(g.out, format, out)
	}
	if len(out) == 0 {
		fmt.Fprintln(g.errOut, "No orphans found.")
		return nil
	}
	headers := []string{"NAME", "PROVIDER", "REGION", "FLEET", "STATE", "AGE", "DELETE-IN", "WHY"}
	if format == "wide" {
		headers = append(headers, "IMAGE", "FOUND", "LAST-ERROR")
	}
	t := newTable(g.out, headers...)
	for _, o := range out {
		deleteIn := "kept"
		if o.DeleteAt != nil {
			deleteIn = shortDuration(time.Until(*o.DeleteAt))
		}
		cols := []any{o.Name, o.Provider, orDash(o.Region), orDash(o.Fleet), o.State, age(o.CreatedAt), deleteIn, o.Why}
		if format == "wide" {
			cols = append(cols, orDash(o.Image), age(&o.FoundAt)+" ago", orDash(o.LastError))
		}
		t.row(cols...)
	}
	return t.flush()
}
