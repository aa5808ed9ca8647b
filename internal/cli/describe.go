package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
)

func newDescribeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "describe fleet NAME",
		Short:   "Show a fleet's spec, status, regions, revisions, instances by region and recent events",
		Example: `  herd describe fleet hello`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if resource(args[0]) != "fleet" {
				return fmt.Errorf("describe knows fleets only (got %q)", args[0])
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			f, err := c.GetFleet(ctx, args[1])
			if err != nil {
				return err
			}
			insts, err := c.ListInstances(ctx, f.Metadata.Name)
			if err != nil {
				return err
			}
			evs, err := c.ListEvents(ctx, "Fleet/"+f.Metadata.Name, 20)
			if err != nil {
				return err
			}
			fd, err := c.FrontDoor(ctx)
			if err != nil {
				return err
			}
			describeFleet(g.out, f)
			describeGlobal(ctx, g.out, c, f)
			describeFront(g.out, f.Metadata.Name, fd)
			describeTenants(g.out, f, insts)
			describeInstances(g.out, f, insts)
			fmt.Fprintln(g.out, "Events:")
			if len(evs) == 0 {
				fmt.Fprintln(g.out, "  <none>")
				return nil
			}
			t := newTable(newIndent(g.out), "AGE", "TYPE", "REASON", "OBJECT", "MESSAGE")
			for _, e := range evs {
				t.row(age(&e.Time), e.Type, e.Reason, e.Object, e.Message)
			}
			return t.flush()
		},
	}
}

// indent prefixes every line with two spaces, for tables nested in describe output. It must keep
// state across writes: tabwriter writes a line in several pieces.
type indent struct {
	w       io.Writer
	midLine *bool
}

func newIndent(w io.Writer) indent { return indent{w: w, midLine: new(bool)} }

func (i indent) Write(p []byte) (int, error) {
	var b strings.Builder
	for _, c := range string(p) {
		if !*i.midLine {
			b.WriteString("  ")
			*i.midLine = true
		}
		b.WriteRune(c)
		if c == '\n' {
			*i.midLine = false
		}
	}
	_, err := io.WriteString(i.w, b.String())
	return len(p), err
}

func describeFleet(w io.Writer, f *v1alpha1.Fleet) {
	s, st := f.Spec, f.Status
	p := func(k string, v any) { fmt.Fprintf(w, "%-20s%v\n", k+":", v) }
	p("Name", f.Metadata.Name)
	p("Created", age(f.Metadata.CreationTimestamp)+" ago")
	p("Image", s.Image)
	if pin := f.Pinned; pin != nil {
		line := fmt.Sprintf("%s (resolved by %s %s ago)", pin.Digest, pin.By, age(&pin.At))
		if pin.Ref != pin.Digest {
			line += fmt.Sprintf("; a new build of %q changes nothing until herd apply or herd rollout restart", pin.Ref)
		}
		p("Pinned image", line)
	} else {
		p("Pinned image", "<none yet>")
	}
	perRegion := ""
	if len(s.Regions) > 1 {
		perRegion = fmt.Sprintf(" (%d per region unless it says otherwise)", deref(s.Replicas.Desired))
	}
	p("Replicas", fmt.Sprintf("%d desired%s | %d min | %d max | %d ready | %d total", f.TotalDesired(), perRegion, deref(s.Replicas.Min), deref(s.Replicas.Max), st.ReadyReplicas, st.Replicas))
	p("Phase", st.Phase)
	if st.Message != "" {
		p("Message", st.Message)
	}
	p("Generation", fmt.Sprintf("%d (observed %d)", f.Metadata.Generation, st.ObservedGeneration))
	p("Rollout", fmt.Sprintf("%s (maxSurge %d, maxUnavailable %d)", s.Rollout.Strategy, deref(s.Rollout.MaxSurge), deref(s.Rollout.MaxUnavailable)))
	if h := st.Healing; h != nil {
		line := fmt.Sprintf("%d replacements under way, %d failed in a row", len(h.Replacements), h.Failures)
		if h.BackoffUntil != nil {
			line += fmt.Sprintf(", paused until %s", h.BackoffUntil.Local().Format(time.TimeOnly))
		}
		p("Healing", line)
	}
	hc := s.HealthCheck
	if hc.Interval != nil && hc.Timeout != nil {
		p("Health check", fmt.Sprintf("GET :%d%s every %s, timeout %s, healthy after %d, unhealthy after %d", hc.Port, hc.Path, hc.Interval.Duration, hc.Timeout.Duration, hc.HealthyThreshold, hc.UnhealthyThreshold))
	}
	if len(s.Listeners) == 0 {
		p("Listeners", "<none>")
	}
	for i, l := range s.Listeners {
		k := ""
		if i == 0 {
			k = "Listeners:"
		}
		fmt.Fprintf(w, "%-20s%s: %s :%d -> instance :%d\n", k, l.Name, l.Protocol, l.Port, l.InstancePort)
	}
	describeRegions(w, f)
	fmt.Fprintln(w, "Revisions:")
	for _, r := range st.Revisions {
		fmt.Fprintf(w, "  %s  image %s  %d/%d ready  weight %d%%\n", r.Name, r.Image, r.ReadyReplicas, r.Replicas, r.Weight)
	}
	fmt.Fprintln(w, "Conditions:")
	if len(st.Conditions) == 0 {
		fmt.Fprintln(w, "  <none>")
		return
	}
	t := newTable(newIndent(w), "TYPE", "STATUS", "REASON", "AGE", "MESSAGE")
	for _, c := range st.Conditions {
		t.row(c.Type, c.Status, c.Reason, age(&c.LastTransitionTime.Time), c.Message)
	}
	_ = t.flush()
}
