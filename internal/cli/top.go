package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/apiserver"
)

func newTopCmd(g *globals) *cobra.Command {
	var output string
	var fleet string
	cmd := &cobra.Command{
		Use:   "top fleets|instances [NAME]",
		Short: "Show CPU, memory, requests/s, p95 latency and 5xx/s of fleets or instances",
		Long: `Show what each fleet or instance uses and serves now, like kubectl top: CPU (cores) and
memory from herd up's scrapes of the instances' agents, and requests per second, p95 latency and
5xx per second from its load balancer over the last 10 seconds. <unknown> is a figure herd up has
not measured yet (an instance just started, an agent that does not answer).`,
		Example: `  herd top fleets
  herd top instances --fleet hello
  herd top instances -o json`,
		Args:      cobra.RangeArgs(1, 2),
		ValidArgs: []string{"fleets", "instances"},
		RunE: func(cmd *cobra.Command, args []string) error {
			format, kind, name, err := resourceArgs(args, output)
			if err != nil {
				return err
			}
			if kind == "fleet" && name != "" {
				if fleet != "" && fleet != name {
					return fmt.Errorf("--fleet %s and fleet %s: give one", fleet, name)
				}
				fleet = name
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			report, err := c.Usage(cmd.Context(), fleet)
			if err != nil {
				return err
			}
			if kind == "fleet" {
				return printFleetUsage(g, format, report.Fleets)
			}
			insts := report.Instances
			if name != "" {
				insts = nil
				for _, in := range report.Instances {
					if in.Instance == name {
						insts = append(insts, in)
					}
				}
				if len(insts) == 0 {
					return fmt.Errorf("instance %q not found", name)
				}
			}
			return printInstanceUsage(g, format, insts)
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
	cmd.Flags().StringVar(&fleet, "fleet", "", "only this fleet's instances")
	return cmd
}

func printFleetUsage(g *globals, format outputFormat, fleets []apiserver.FleetUsage) error {
	if format == "yaml" || format == "json" {
		return printObject(g.out, format, fleets)
	}
	if len(fleets) == 0 {
		fmt.Fprintln(g.errOut, "No fleets with instances found.")
		return nil
	}
	t := newTable(g.out, append([]string{"NAME", "INSTANCES"}, usageHeaders...)...)
	for _, f := range fleets {
		t.row(append([]any{f.Fleet, f.Instances}, usageColumns(f.Usage)...)...)
	}
	return t.flush()
}

func printInstanceUsage(g *globals, format outputFormat, insts []apiserver.InstanceUsage) error {
	if format == "yaml" || format == "json" {
		return printObject(g.out, format, insts)
	}
	if len(insts) == 0 {
		fmt.Fprintln(g.errOut, "No instances found.")
		return nil
	}
	t := newTable(g.out, append([]string{"NAME", "FLEET", "REGION", "PHASE"}, usageHeaders...)...)
	for _, in := range insts {
		t.row(append([]any{in.Instance, in.Fleet, in.Region, in.Phase}, usageColumns(in.Usage)...)...)
	}
	return t.flush()
}

var usageHeaders = []string{"CPU(cores)", "MEMORY(bytes)", "REQ/S", "P95", "5XX/S"}

// usageColumns formats figures as kubectl top does (millicores, Mi) and unknown ones as <unknown>.
func usageColumns(u apiserver.Usage) []any {
	return []any{
		figure(u.CPUCores, func(v float64) string { return fmt.Sprintf("%dm", int64(v*1000+0.5)) }),
		figure(u.MemoryBytes, func(v float64) string { return fmt.Sprintf("%dMi", int64(v/(1<<20)+0.5)) }),
		figure(u.RequestsPerSecond, perSecond),
		figure(u.LatencyP95Seconds, func(v float64) string {
			return time.Duration(v * float64(time.Second)).Round(100 * time.Microsecond).String()
		}),
		figure(u.Errors5xxPerSecond, perSecond),
	}
}

func perSecond(v float64) string { return fmt.Sprintf("%.1f", v) }

func figure(v *float64, format func(float64) string) string {
	if v == nil {
		return "<unknown>"
	}
	return format(*v)
}
