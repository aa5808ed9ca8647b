package cli

import (
	"cmp"
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
)

func newGetCmd(g *globals) *cobra.Command {
	var output string
	var fleet string
	var orphans bool
	cmd := &cobra.Command{
		Use:   "get fleets|instances|distributions|regions|routes|rtt|tenants [NAME]",
		Short: "List fleets, instances, distributions, the regions of fleets, global routes, the round trips to regions or tenants",
		Long: `get lists fleets, instances, or regions: one line per fleet and region, with the region's
desired, running and ready instances, the revision it runs (during a wave, the old one until the
wave reaches it), its state (Ready, Scaling, Pending, Degraded, ProviderFailed, Unreachable) and
why. For regions, NAME is a fleet. routes lists each global hostname (spec.global) with each
region's part in its DNS answers and why; NAME is a hostname or a fleet.

get rtt lists the round trip from each client network (/24, /48 for IPv6) to each region, as the
region's own load balancer measures it on the connections it serves (the kernel's smoothed RTT,
averaged): what a latency-based answer ranks regions by. For rtt, NAME is a client network.

get instances --orphans lists the instances the providers run that no fleet owns (no record, and
no fleet that would adopt them: left by a process killed at the wrong moment or a store restored
from an older copy), why, and when herd up deletes each ("kept" under herd up --orphans=keep).

get tenants FLEET lists the tenants of a fleet with spec.tenancy: each tenant's instances, how
many are ready, the revisions they run, the image it is pinned to, whether spec.tenancy.tenants
declares it; the warm pool shows as "(warm)".

get distributions lists the distributions herd up runs edge locations for: each listener's address
(or why it does not serve) and the origins.`,
		Example: `  herd get fleets
  herd get instances --fleet hello -o wide
  herd get instances --orphans        # instances no fleet owns, and when herd deletes each
  herd get fleet hello -o yaml
  herd get regions
  herd get regions hello -o wide
  herd get routes                     # each global hostname's answer per region, and why
  herd get rtt
  herd get rtt 10.216.1.0/24 -o json
  herd get tenants saas
  herd get distributions`,
		Args:      cobra.RangeArgs(1, 2),
		ValidArgs: []string{"fleets", "instances", "distributions", "regions", "routes", "rtt", "tenants"},
		RunE: func(cmd *cobra.Command, args []string) error {
			switch resource(args[0]) {
			case "region":
				return getRegions(cmd.Context(), g, args[1:], output)
			case "rtt":
				return getRTT(cmd.Context(), g, args[1:], output)
			case "route":
				return getRoutes(cmd.Context(), g, args[1:], output)
			case "tenant":
				return getTenants(cmd.Context(), g, args[1:], output)
			case "distribution":
				return getDistributions(cmd.Context(), g, args[1:], output)
			}
			format, kind, name, err := resourceArgs(args, output)
			if err != nil {
				return err
			}
			if orphans && kind != "instance" {
				return fmt.Errorf("--orphans lists instances: herd get instances --orphans")
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
				if orphans {
					return getOrphans(cmd.Context(), g, format, fleet, name)
				}
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
				return fmt.Errorf("unknown resource %q: use fleets, instances, regions or routes", args[0])
			}
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: wide, yaml or json")
	cmd.Flags().StringVar(&fleet, "fleet", "", "only instances of this fleet")
	cmd.Flags().BoolVar(&orphans, "orphans", false, "list the instances the providers run that no fleet owns, and when herd deletes each (with instances)")
	return cmd
}

// resource normalises fleets/fleet/fl and instances/instance/inst, like kubectl's short names.
func resource(s string) string {
	switch strings.ToLower(s) {
	case "fleet", "fleets", "fl":
		return "fleet"
	case "instance", "instances", "inst", "in":
		return "instance"
	case "region", "regions", "rg":
		return "region"
	case "route", "routes":
		return "route"
	case "rtt", "rtts":
		return "rtt"
	case "tenant", "tenants":
		return "tenant"
	case "distribution", "distributions", "dist":
		return "distribution"
	}
	return s
}

// getRegions prints the regions of one fleet (args[0]) or of every fleet.
func getRegions(ctx context.Context, g *globals, args []string, output string) error {
	format, c, err := formatAndClient(g, output)
	if err != nil {
		return err
	}
	var fleets []v1alpha1.Fleet
	if len(args) == 1 {
		f, err := c.GetFleet(ctx, args[0])
		if err != nil {
			return err
		}
		fleets = []v1alpha1.Fleet{*f}
	} else if fleets, err = c.ListFleets(ctx); err != nil {
		return err
	}
	lbs, err := c.RegionLBs(ctx)
	if err != nil {
		return err
	}
	if format == "yaml" || format == "json" {
		return printObject(g.out, format, withLBs(regionRows(fleets), fleets, lbs))
	}
	return printRegions(g, fleets, lbs, format == "wide")
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
	headers := []string{"NAME", "READY", "DESIRED", "MIN", "MAX", "IMAGE", "REVISION", "PHASE", "AGE"}
	if wide {
		headers = append(headers, "STRATEGY", "REGIONS", "MESSAGE")
	}
	t := newTable(g.out, headers...)
	for _, f := range fleets {
		r := f.Spec.Replicas
		desired := f.TotalDesired()
		cols := []any{f.Metadata.Name, fmt.Sprintf("%d/%d", f.Status.ReadyReplicas, desired), desired, deref(r.Min), deref(r.Max),
			pinnedShort(&f), f.Status.CurrentRevision, f.Status.Phase, age(f.Metadata.CreationTimestamp)}
		if wide {
			var regions []string
			for _, rg := range f.Spec.Regions {
				regions = append(regions, rg.Name+"/"+rg.Provider)
			}
			cols = append(cols, f.Spec.Rollout.Strategy, strings.Join(regions, ","), f.Status.Message)
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

// pinnedShort is the image a fleet boots as NAME@sha256:<12 hex digits>, or the digest alone
// when spec.image gives one.
func pinnedShort(f *v1alpha1.Fleet) string {
	digest := f.BootImage()
	if hex, ok := strings.CutPrefix(digest, "sha256:"); ok && len(hex) > 12 {
		digest = "sha256:" + hex[:12]
	}
	if f.Pinned == nil || f.Pinned.Ref == f.Pinned.Digest {
		return digest
	}
	return f.Pinned.Ref + "@" + digest
}

// getDistributions prints one distribution (args[0]) or all, with where herd up's edge location
// serves each.
func getDistributions(ctx context.Context, g *globals, args []string, output string) error {
	format, c, err := formatAndClient(g, output)
	if err != nil {
		return err
	}
	var ds []v1alpha1.Distribution
	if len(args) == 1 {
		d, err := c.GetDistribution(ctx, args[0])
		if err != nil {
			return err
		}
		ds = []v1alpha1.Distribution{*d}
	} else if ds, err = c.ListDistributions(ctx); err != nil {
		return err
	}
	if format == "yaml" || format == "json" {
		if len(args) == 1 {
			return printObject(g.out, format, ds[0])
		}
		return printObject(g.out, format, ds)
	}
	if len(ds) == 0 {
		fmt.Fprintln(g.errOut, "No distributions found.")
		return nil
	}
	t := newTable(g.out, "NAME", "LISTENERS", "ORIGINS", "BEHAVIORS", "STATUS", "AGE")
	for _, d := range ds {
		var listeners, origins []string
		status := "Serving"
		for _, l := range d.Status.Listeners {
			if l.Error != "" {
				status = "Degraded"
				listeners = append(listeners, l.Name+"=error")
				continue
			}
			listeners = append(listeners, l.Address)
		}
		for _, o := range d.Spec.Origins {
			origins = append(origins, o.Name+"="+cmp.Or(o.URL, "fleet/"+o.Fleet))
		}
		if d.Status.Error != "" || len(d.Status.Listeners) == 0 {
			status = "Degraded: " + cmp.Or(d.Status.Error, "no edge location here")
		} else if status == "Degraded" {
			for _, l := range d.Status.Listeners {
				if l.Error != "" {
					status += ": " + l.Name + ": " + l.Error
					break
				}
			}
		}
		t.row(d.Metadata.Name, strings.Join(listeners, ","), strings.Join(origins, ","), len(d.Spec.Behaviors), status, age(d.Metadata.CreationTimestamp))
	}
	return t.flush()
}
