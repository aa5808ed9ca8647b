package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/netlab"
)

func newChaosCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Inject faults on purpose: cut or slow a region, kill an instance, pause health checks",
		Long: `herd chaos injects a fault for a while, to show what the fleet does when it happens: a region
cut off from its clients or slowed down, an instance killed, a fleet's health checks paused.

Each action is stored and recorded as an event, and is undone when its --duration ends (5m by
default), when it is stopped (herd chaos stop), and when herd up starts again: nothing it does
outlives its duration or the control plane that did it. Region actions need regions that are
networks (the local provider's).`,
		Example: `  herd chaos partition-region eu --duration 30s
  herd chaos degrade-region us --latency 300ms --loss 20% --duration 2m
  herd chaos kill-instance hello-7x2kq
  herd chaos pause-health hello --duration 1m
  herd chaos list
  herd chaos stop partition-region-eu-3fa91c`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(
		newChaosStartCmd(g, v1alpha1.ChaosPartitionRegion, "REGION",
			"Cut a region off its clients: its link drops every packet, both ways",
			`  herd chaos partition-region eu --duration 30s`),
		newChaosStartCmd(g, v1alpha1.ChaosDegradeRegion, "REGION",
			"Give a region's link more latency and loss",
			`  herd chaos degrade-region us --latency 300ms --loss 20% --duration 2m`),
		newChaosStartCmd(g, v1alpha1.ChaosKillInstance, "INSTANCE",
			"Kill every process of an instance with SIGKILL, as a crash of its machine (the controller replaces it)",
			`  herd chaos kill-instance hello-7x2kq`),
		newChaosStartCmd(g, v1alpha1.ChaosPauseHealth, "FLEET",
			"Stop the load balancers' health checks of a fleet's instances: they keep their last state",
			`  herd chaos pause-health hello --duration 1m`),
		newChaosResumeHealthCmd(g),
		newChaosListCmd(g),
		newChaosStopCmd(g),
	)
	return cmd
}

func newChaosStartCmd(g *globals, action, arg, short, example string) *cobra.Command {
	var duration time.Duration
	var latency, loss string
	cmd := &cobra.Command{
		Use:     action + " " + arg,
		Short:   short,
		Example: example,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := v1alpha1.ChaosActionSpec{Action: action, Target: args[0], Duration: v1alpha1.D(duration)}
			if action == v1alpha1.ChaosDegradeRegion {
				if latency == "" && loss == "" {
					return errors.New("degrade-region needs --latency or --loss, e.g. --latency 300ms --loss 20%")
				}
				opts := map[string]string{}
				if latency != "" {
					opts[netlab.OptionLatency] = latency
				}
				if loss != "" {
					opts[netlab.OptionLoss] = loss
				}
				shape, errs := netlab.ParseShape(field.NewPath("flags"), opts)
				if len(errs) > 0 {
					e := errs[0]
					return fmt.Errorf("--%s %v: %s", strings.TrimPrefix(e.Field, "flags."), e.BadValue, e.Detail)
				}
				spec.Latency, spec.Loss = v1alpha1.D(shape.Latency), shape.Loss
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			a, err := c.StartChaos(cmd.Context(), spec)
			if err != nil {
				return err
			}
			if a.Status.Phase != v1alpha1.ChaosActive {
				fmt.Fprintf(g.out, "chaos/%s: %s\n", a.Metadata.Name, a.Status.Message)
				return nil
			}
			fmt.Fprintf(g.out, "chaos/%s started: %s %s until %s (herd chaos stop %s ends it now)\n", a.Metadata.Name,
				action, args[0], a.Status.EndsAt.Local().Format("15:04:05"), a.Metadata.Name)
			return nil
		},
	}
	if action != v1alpha1.ChaosKillInstance {
		cmd.Flags().DurationVar(&duration, "duration", 0, "how long the action lasts before it is undone (1s to 24h; default 5m)")
	}
	if action == v1alpha1.ChaosDegradeRegion {
		cmd.Flags().StringVar(&latency, "latency", "", "round-trip time the region's link adds, e.g. 300ms")
		cmd.Flags().StringVar(&loss, "loss", "", "share of packets the link drops each way, e.g. 20% or 0.2")
	}
	return cmd
}

func newChaosResumeHealthCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "resume-health FLEET",
		Short:   "Resume the health checks a pause-health stopped (stops that action now)",
		Example: `  herd chaos resume-health hello`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListChaos(cmd.Context())
			if err != nil {
				return err
			}
			for _, a := range list {
				if a.Spec.Action == v1alpha1.ChaosPauseHealth && a.Spec.Target == args[0] && a.Status.Phase == v1alpha1.ChaosActive {
					if _, err := c.StopChaos(cmd.Context(), a.Metadata.Name); err != nil {
						return err
					}
					fmt.Fprintf(g.out, "chaos/%s stopped: health checks of fleet %s resumed\n", a.Metadata.Name, args[0])
					return nil
				}
			}
			return fmt.Errorf("fleet %s has no paused health checks (herd chaos list shows the actions)", args[0])
		},
	}
}

func newChaosListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:     "list",
		Short:   "List chaos actions, newest first",
		Example: `  herd chaos list`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			list, err := c.ListChaos(cmd.Context())
			if err != nil {
				return err
			}
			if len(list) == 0 {
				g.errOut.Write([]byte("No chaos actions.\n"))
				return nil
			}
			t := newTable(g.out, "NAME", "ACTION", "TARGET", "PHASE", "STARTED", "ENDS", "MESSAGE")
			for _, a := range list {
				ends := "-"
				if a.Status.EndedAt != nil {
					ends = "ended " + age(a.Status.EndedAt) + " ago"
				} else if a.Status.EndsAt != nil {
					ends = "in " + time.Until(*a.Status.EndsAt).Round(time.Second).String()
				}
				t.row(a.Metadata.Name, a.Spec.Action, a.Spec.Target, a.Status.Phase, age(&a.Status.StartedAt)+" ago", ends, a.Status.Message)
			}
			return t.flush()
		},
	}
}

func newChaosStopCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "stop [NAME]",
		Short: "Undo a chaos action now, or every active one without NAME",
		Example: `  herd chaos stop partition-region-eu-3fa91c
  herd chaos stop`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			names := args
			if len(names) == 0 {
				list, err := c.ListChaos(cmd.Context())
				if err != nil {
					return err
				}
				for _, a := range list {
					if a.Status.Phase == v1alpha1.ChaosActive {
						names = append(names, a.Metadata.Name)
					}
				}
				if len(names) == 0 {
					fmt.Fprintln(g.out, "No active chaos action.")
					return nil
				}
			}
			for _, n := range names {
				a, err := c.StopChaos(cmd.Context(), n)
				if err != nil {
					return err
				}
				fmt.Fprintf(g.out, "chaos/%s %s: %s\n", a.Metadata.Name, a.Status.Phase, a.Status.Message)
			}
			return nil
		},
	}
}
