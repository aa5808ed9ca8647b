package cli

import (
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
)

func newGetCmd(g *globals) *cobra.Command {
	var output string
	var fleet string
	cmd := &cobra.Command{
		Use:   "get fleets|instances|routes [NAME]",
		Short: "List fleets, instances or global routes",
		Example: `  herd get fleets
  herd get instances --fleet hello -o wide
  herd get fleet hello -o yaml
  herd get routes                     # each global hostname's answer per region, and why`,
		Args:      cobra.RangeArgs(1, 2),
		ValidArgs: []string{"fleets", "instances", "routes"},
		RunE: func(cmd *cobra.Command, args []string) error {
			if resource(args[0]) == "route" {
				return getRoutes(cmd.Context(), g, args, output)
			}
			format, kind, name, err := resourceArgs(args, output)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			switch kind {
			case "fleet":
				var fleets []v1alpha1.Fleet
				if name != "" {
					f, err := c.GetFleet(cmd.Context(), name)
					if err != nil {
						return err
					}
					fleets = []v1alpha1.Fleet{*f}
				} else if fleets, err = c.ListFleets(cmd.Context()); err != nil {
					return err
				}
				if format == "yaml" || format == "json" {
					if name != "" {
						return printObject(g.out, format, fleets[0])
					}
					return printObject(g.out, format, fleets)
				}
				return printFleets(g, fleets, format == "wide")
			case "instance":
				insts, err := c.ListInstances(cmd.Context(), fleet)
				if err != nil {
					return err
				}
				if name != "" {
					insts = filterInstance(insts, name)
					if len(insts) == 0 {
						return fmt.Errorf("instance %q not found", name)
					}
				}
				if format == "yaml" || format == "json" {
					if name != "" {
						return printObject(g.out, format, insts[0])
					}
					return printObject(g.out, format, insts)
				}
				return printInstances(g, insts, format == "wide")
			default:
				return fmt.Errorf("unknown resource %q: use fleets, instances or routes", args[0])
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, yaml or json")
	cmd.Flags().StringVar(&fleet, "fleet", "", "only instances of this fleet")
	return cmd
}

// resource normalises fleets/fleet/fl and instances/instance/inst, like kubectl's short names.
func resource(s string) string {
	switch strings.ToLower(s) {
	case "fleet", "fleets", "fl":
		return "fleet"
	case "instance", "instances", "inst", "in":
		return "instance"
	case "route", "routes":
		return "route"
	}
	return s
}

func filterInstance(in []v1alpha1.Instance, name string) []v1alpha1.Instance {
	for _, x := range in {
		if x.Metadata.Name == name {
			return []v1alpha1.Instance{x}
		}
	}
	return nil
}

func printFleets(g *globals, fleets []v1alpha1.Fleet, wide bool) error {
	if len(fleets) == 0 {
		fmt.Fprintln(g.errOut, "No fleets found.")
		return nil
	}
	headers := []string{"NAME", "READY", "DESIRED", "MIN", "MAX", "REVISION", "PHASE", "AGE"}
	if wide {
		headers = append(headers, "IMAGE", "STRATEGY", "REGIONS", "MESSAGE")
	}
	t := newTable(g.out, headers...)
	for _, f := range fleets {
		r := f.Spec.Replicas
		cols := []any{f.Metadata.Name, fmt.Sprintf("%d/%d", f.Status.ReadyReplicas, deref(r.Desired)), deref(r.Desired), deref(r.Min), deref(r.Max),
			f.Status.CurrentRevision, f.Status.Phase, age(f.Metadata.CreationTimestamp)}
		if wide {
			var regions []string
			for _, rg := range f.Spec.Regions {
				regions = append(regions, rg.Name+"/"+rg.Provider)
			}
			cols = append(cols, f.Spec.Image, f.Spec.Rollout.Strategy, strings.Join(regions, ","), f.Status.Message)
		}
		t.row(cols...)
	}
	return t.flush()
}

func printInstances(g *globals, insts []v1alpha1.Instance, wide bool) error {
	if len(insts) == 0 {
		fmt.Fprintln(g.errOut, "No instances found.")
		return nil
	}
	sort.Slice(insts, func(i, j int) bool {
		if insts[i].Spec.Fleet != insts[j].Spec.Fleet {
			return insts[i].Spec.Fleet < insts[j].Spec.Fleet
		}
		return insts[i].Metadata.Name < insts[j].Metadata.Name
	})
	headers := []string{"NAME", "FLEET", "REVISION", "REGION", "PHASE", "ADDRESS", "LB", "AGE"}
	if wide {
		headers = append(headers, "PROVIDER", "PROVIDER-ID", "IMAGE", "LAST-ERROR")
	}
	t := newTable(g.out, headers...)
	for _, in := range insts {
		cols := []any{in.Metadata.Name, in.Spec.Fleet, in.Spec.Revision, in.Spec.Region, in.Status.Phase, in.Status.Address, in.Status.LBHealth, age(in.Status.CreatedAt)}
		if wide {
			cols = append(cols, in.Spec.Provider, in.Status.ProviderID, in.Spec.Image, in.Status.LastError)
		}
		t.row(cols...)
	}
	return t.flush()
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
