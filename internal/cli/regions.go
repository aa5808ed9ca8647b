package cli

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/regionlb"
)

// regionRow is one region of one fleet, as `herd get regions -o yaml|json` prints it.
type regionRow struct {
	Fleet    string `json:"fleet"`
	Provider string `json:"provider"`
	// LB is where the region's clients reach the fleet: the region's own load balancer's
	// address, or "herd-up" for a fleet served by herd up's embedded load balancer.
	LB string `json:"lb,omitempty"`
	// LBState is Synced when the region's load balancer runs the configuration the store gives
	// it, else what went wrong ("-" for herd up's).
	LBState string `json:"lbState,omitempty"`
	v1alpha1.RegionStatus
}

// withLBs fills each row's load balancer from what the control plane reports of the regional
// ones.
func withLBs(rows []regionRow, fleets []v1alpha1.Fleet, lbs []apiserver.RegionLB) []regionRow {
	regional := map[string]bool{}
	for i := range fleets {
		regional[fleets[i].Metadata.Name] = regionlb.ServedRegionally(&fleets[i])
	}
	for i := range rows {
		r := &rows[i]
		if !regional[r.Fleet] {
			r.LB, r.LBState = "herd-up", "-"
			continue
		}
		r.LB, r.LBState = "-", "None"
		for _, lb := range lbs {
			if lb.Region != r.Name {
				continue
			}
			r.LB, r.LBState = lb.Address, "Synced"
			if !lb.Synced {
				r.LBState = "Error: " + lb.Error
			}
		}
	}
	return rows
}

// regionRows lists every region of the fleets, in the order of each fleet's spec. A region the
// controller has not reported yet has its spec's figures and no phase.
func regionRows(fleets []v1alpha1.Fleet) []regionRow {
	var rows []regionRow
	for i := range fleets {
		f := &fleets[i]
		for _, rg := range f.Spec.Regions {
			row := regionRow{Fleet: f.Metadata.Name, Provider: rg.Provider, RegionStatus: v1alpha1.RegionStatus{Name: rg.Name}}
			if st := f.Status.RegionStatusOf(rg.Name); st != nil {
				row.RegionStatus = *st
			} else if f.Spec.Replicas.Desired != nil {
				row.Desired = *f.RegionReplicas(rg.Name).Desired
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// printRegions writes one line per fleet and region: its counts, revision, state and why, and
// with wide its wave.
func printRegions(g *globals, fleets []v1alpha1.Fleet, lbs []apiserver.RegionLB, wide bool) error {
	rows := withLBs(regionRows(fleets), fleets, lbs)
	if len(rows) == 0 {
		fmt.Fprintln(g.errOut, "No regions found.")
		return nil
	}
	headers := []string{"FLEET", "REGION", "DESIRED", "REPLICAS", "READY", "REVISION", "STATE", "MESSAGE"}
	if wide {
		headers = append(headers[:len(headers)-1], "PROVIDER", "LB", "LB-STATE", "WAVE", "MESSAGE")
	}
	t := newTable(g.out, headers...)
	for _, r := range rows {
		state := r.Phase
		if state == "" {
			state = "Unknown"
		}
		cols := []any{r.Fleet, r.Name, r.Desired, r.Replicas, r.ReadyReplicas, r.CurrentRevision, state}
		if wide {
			cols = append(cols, r.Provider, r.LB, r.LBState, waveCell(r.Rollout))
		}
		t.row(append(cols, r.Message)...)
	}
	return t.flush()
}

// waveCell says where a region is in a wave: "-" outside one.
func waveCell(rr *v1alpha1.RolloutStatus) string {
	if rr == nil {
		return "-"
	}
	if rr.Strategy == v1alpha1.StrategyCanary && rr.InProgress() {
		return fmt.Sprintf("%s step %d", rr.Phase, rr.Step+1)
	}
	return rr.Phase
}

// describeRegions writes the fleet's regions, each with its replicas, state and wave.
func describeRegions(w io.Writer, f *v1alpha1.Fleet) {
	fmt.Fprintln(w, "Regions:")
	rows := regionRows([]v1alpha1.Fleet{*f})
	if len(rows) == 0 {
		fmt.Fprintln(w, "  <none>")
	}
	for _, r := range rows {
		state := r.Phase
		if state == "" {
			state = "Unknown"
		}
		fmt.Fprintf(w, "  %s on %s: %s, %d desired | %d ready | %d total, revision %s\n", r.Name, r.Provider, state, r.Desired, r.ReadyReplicas, r.Replicas, r.CurrentRevision)
		if r.Message != "" {
			fmt.Fprintf(w, "    %s\n", r.Message)
		}
		if rr := r.Rollout; rr != nil {
			fmt.Fprintf(w, "    wave: %s %s -> %s%s %s\n", waveCell(rr), rr.PreviousRevision, rr.Revision, weightsText(rr.Weights), rr.Message)
		}
	}
}

// describeInstances writes the fleet's instances, grouped by region: the spec's regions in order,
// then any other region instances are left in.
func describeInstances(w io.Writer, f *v1alpha1.Fleet, insts []v1alpha1.Instance) {
	fmt.Fprintln(w, "Instances:")
	if len(insts) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	var order []string
	for _, rg := range f.Spec.Regions {
		order = append(order, rg.Name)
	}
	byRegion := map[string][]v1alpha1.Instance{}
	for _, in := range insts {
		byRegion[in.Spec.Region] = append(byRegion[in.Spec.Region], in)
		if !slices.Contains(order, in.Spec.Region) {
			order = append(order, in.Spec.Region)
		}
	}
	for _, region := range order {
		list := byRegion[region]
		if len(list) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s (%d):\n", region, len(list))
		t := newTable(newIndent(newIndent(w)), "NAME", "REVISION", "PHASE", "ADDRESS", "LB", "AGE", "LAST-ERROR")
		for _, in := range list {
			t.row(in.Metadata.Name, in.Spec.Revision, in.Status.Phase, in.Status.Address, in.Status.LBHealth, age(in.Status.CreatedAt), in.Status.LastError)
		}
		_ = t.flush()
	}
}

// weightsText formats a rollout's weights as " [rev=10% rev=90%]", "" for none.
func weightsText(weights map[string]int32) string {
	if len(weights) == 0 {
		return ""
	}
	var ws []string
	for r, w := range weights {
		ws = append(ws, fmt.Sprintf("%s=%d%%", r, w))
	}
	slices.Sort(ws)
	return " [" + strings.Join(ws, " ") + "]"
}
