package cli

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
)

func newRolloutCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rollout",
		Short: "Follow, promote, abort, list and undo a fleet's revision rollouts; pin a tenant to an image",
	}
	var watch bool
	var interval time.Duration
	status := &cobra.Command{
		Use:     "status FLEET",
		Short:   "Show the progress of the fleet's rollout; with --watch, follow it until it ends",
		Example: "  herd rollout status hello -w",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			return rolloutStatus(cmd.Context(), c, g.out, args[0], watch, interval)
		},
	}
	status.Flags().BoolVarP(&watch, "watch", "w", false, "poll until the rollout succeeds, rolls back or fails; exit non-zero unless it succeeds")
	status.Flags().DurationVar(&interval, "interval", time.Second, "how often --watch polls")
	history := &cobra.Command{
		Use:   "history FLEET",
		Short: "List the revisions the fleet has served, newest first",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			f, err := c.GetFleet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			printHistory(g.out, f)
			return nil
		},
	}
	undo := rolloutAction(g, &cobra.Command{
		Use:   "undo FLEET",
		Short: "Go back to the revision that served before the current one",
		Long: `undo points the fleet back at the image of its previous revision. While that revision's
instances still exist (a blue/green rollback window) traffic moves back by weights alone;
otherwise the previous revision is rolled out again with the fleet's strategy.`,
	}, (*client.Client).UndoRollout, func(f *v1alpha1.Fleet) string {
		return fmt.Sprintf("fleet/%s rolling back to image %s", f.Metadata.Name, f.Spec.Image)
	})
	promote := rolloutAction(g, &cobra.Command{
		Use:   "promote FLEET",
		Short: "Skip the rollout's remaining canary steps and pauses: all traffic to the new revision",
		Long: `promote ends a rollout in progress early: a canary skips its remaining steps and pauses,
and all traffic moves to the new revision as soon as a full set of its instances serves; a
blue/green rollout that has switched ends its rollback window and deletes the old instances.`,
	}, (*client.Client).PromoteRollout, func(f *v1alpha1.Fleet) string {
		return fmt.Sprintf("fleet/%s rollout of %s promoted", f.Metadata.Name, f.Status.Rollout.Revision)
	})
	abort := rolloutAction(g, &cobra.Command{
		Use:   "abort FLEET",
		Short: "Roll the rollout in progress back now: all traffic to the stable revision",
		Long: `abort rolls a rollout in progress back at once: the new revision gets no more traffic and
its instances are deleted; the fleet is marked Degraded ("aborted by user") until its spec names
another image (herd rollout undo, or herd apply).`,
	}, (*client.Client).AbortRollout, func(f *v1alpha1.Fleet) string {
		ro := f.Status.Rollout
		return fmt.Sprintf("fleet/%s rollout of %s aborted: back to %s", f.Metadata.Name, ro.Revision, ro.PreviousRevision)
	})
	restart := &cobra.Command{
		Use:   "restart FLEET",
		Short: "Resolve the fleet's spec.image again and roll out what it names now",
		Long: `restart resolves the fleet's spec.image again, as an apply of the same spec would: when the
name now names another build (herd image build ran since the fleet was applied), the fleet pins
the new digest and rolls it out with its strategy; when it names the pinned build, nothing changes.`,
		Example: "  herd image build -f examples/hello/image.yaml && herd rollout restart hello",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.RestartRollout(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(g.out, restartLine(res))
			return nil
		},
	}
	cmd.AddCommand(status, history, undo, promote, abort, restart, newPinCmd(g), newUnpinCmd(g))
	return cmd
}

// newPinCmd is herd rollout pin FLEET --tenant T [--image REF].
func newPinCmd(g *globals) *cobra.Command {
	var tenant, image string
	cmd := &cobra.Command{
		Use:   "pin FLEET --tenant T [--image REF]",
		Short: "Keep one tenant of a fleet with tenancy on an image of its own: a canary that is one customer",
		Long: `pin keeps the tenant's instances on one image whatever the fleet's spec.image says: with
--image, the tenant's instances are rolled to that image (a canary that is one customer) while the
other tenants keep theirs; without it, the tenant stays on the image the fleet boots now while a
later apply rolls the others. herd rollout unpin rolls the tenant back to the fleet's image.`,
		Example: `  herd rollout pin saas --tenant acme --image hello-v2   # acme alone runs hello-v2
  herd get tenants saas
  herd rollout unpin saas --tenant acme                  # acme follows the fleet again`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			f, err := c.PinTenant(cmd.Context(), args[0], tenant, image)
			if err != nil {
				return err
			}
			p := f.Requests.TenantPins[tenant]
			fmt.Fprintf(g.out, "fleet/%s tenant %s pinned to %s (%s); the other tenants follow %s\n", f.Metadata.Name, tenant, p.Ref, p.Digest, f.BootImage())
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant to pin (required)")
	cmd.Flags().StringVar(&image, "image", "", "the node image (name or digest) the tenant runs; default: the image the fleet boots now")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

// newUnpinCmd is herd rollout unpin FLEET --tenant T.
func newUnpinCmd(g *globals) *cobra.Command {
	var tenant string
	cmd := &cobra.Command{
		Use:   "unpin FLEET --tenant T",
		Short: "Let a pinned tenant follow the fleet's image again (its instances roll back to it)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			f, err := c.UnpinTenant(cmd.Context(), args[0], tenant)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "fleet/%s tenant %s follows the fleet's image %s\n", f.Metadata.Name, tenant, f.BootImage())
			return nil
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "the tenant to unpin (required)")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

// rolloutAction completes cmd into a command on one fleet that sends one request and prints what
// the API answered, as report words it.
func rolloutAction(g *globals, cmd *cobra.Command, send func(*client.Client, context.Context, string) (*v1alpha1.Fleet, error), report func(*v1alpha1.Fleet) string) *cobra.Command {
	cmd.Args = cobra.ExactArgs(1)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		c, err := g.client()
		if err != nil {
			return err
		}
		f, err := send(c, cmd.Context(), args[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(g.out, report(f))
		return nil
	}
	return cmd
}

// rolloutDone reports whether the fleet's rollout of its current revision has ended, and the
// error to exit with when it did not succeed.
func rolloutDone(f *v1alpha1.Fleet) (bool, error) {
	ro := f.Status.Rollout
	if f.Status.ObservedGeneration < f.Metadata.Generation {
		return false, nil
	}
	if ro == nil || ro.Revision != f.Status.CurrentRevision {
		// A Rolling update (or none): done once the fleet is Ready.
		return f.Status.Phase == "Ready", nil
	}
	switch ro.Phase {
	case v1alpha1.RolloutSucceeded:
		return true, nil
	case v1alpha1.RolloutRolledBack, v1alpha1.RolloutFailed:
		return true, fmt.Errorf("rollout of %s %s: %s", ro.Revision, ro.Phase, ro.Message)
	}
	return false, nil
}

func rolloutStatus(ctx context.Context, c *client.Client, out io.Writer, name string, watch bool, interval time.Duration) error {
	last := ""
	for {
		f, err := c.GetFleet(ctx, name)
		if err != nil {
			return err
		}
		line := rolloutLine(f)
		if line != last {
			fmt.Fprintln(out, line)
			last = line
		}
		done, failed := rolloutDone(f)
		if !watch || done {
			return failed
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func rolloutLine(f *v1alpha1.Fleet) string {
	st := f.Status
	ro := st.Rollout
	if ro == nil || ro.Revision != st.CurrentRevision {
		return fmt.Sprintf("fleet/%s revision %s: %s, %d/%d ready %s", f.Metadata.Name, st.CurrentRevision, st.Phase, st.ReadyReplicas, st.Replicas, st.Message)
	}
	var ws []string
	for r, w := range ro.Weights {
		ws = append(ws, fmt.Sprintf("%s=%d%%", r, w))
	}
	sort.Strings(ws)
	step := canaryStep(f, ro)
	if len(f.Spec.Regions) > 1 {
		step = "" // a wave: each region is at its own step
	}
	return fmt.Sprintf("fleet/%s %s rollout %s -> %s: %s%s %v %s", f.Metadata.Name, ro.Strategy, ro.PreviousRevision, ro.Revision, ro.Phase, step, ws, ro.Message) + waveLines(f)
}

// waveLines is one line per region of a fleet's wave across regions, in the wave's order, ""
// for a fleet in one region.
func waveLines(f *v1alpha1.Fleet) string {
	var b strings.Builder
	for _, region := range f.RegionOrder() {
		rs := f.Status.RegionStatusOf(region)
		if rs == nil || rs.Rollout == nil || rs.Rollout.Revision != f.Status.Rollout.Revision {
			continue
		}
		rr := rs.Rollout
		step := ""
		if rr.InProgress() {
			step = canaryStep(f, rr)
		}
		fmt.Fprintf(&b, "\n  region %s: %s%s%s %d/%d ready %s", region, rr.Phase, step, weightsText(rr.Weights), rs.ReadyReplicas, rs.Desired, rr.Message)
	}
	return b.String()
}

// canaryStep says which step a canary rollout is at, "" for other strategies.
func canaryStep(f *v1alpha1.Fleet, ro *v1alpha1.RolloutStatus) string {
	steps := ""
	if ro.Strategy == v1alpha1.StrategyCanary {
		steps = fmt.Sprintf(" step %d/%d", ro.Step+1, len(f.Spec.Rollout.Steps))
		if int(ro.Step) >= len(f.Spec.Rollout.Steps) {
			steps = " promoting"
		}
	}
	return steps
}

func printHistory(out io.Writer, f *v1alpha1.Fleet) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REVISION\tIMAGE\tSPEC.IMAGE\tPINNED-BY\tFROM\tUNTIL")
	for _, h := range f.Status.History {
		until := "now"
		if h.Until != nil {
			until = h.Until.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", h.Revision, h.Image, orDash(h.Ref), orDash(h.PinnedBy), h.Since.Format(time.RFC3339), until)
	}
	tw.Flush()
}

// restartLine says what a rollout restart did.
func restartLine(res *apiserver.RestartResult) string {
	f := res.Fleet
	if f.BootImage() == res.Previous {
		return fmt.Sprintf("fleet/%s unchanged: spec.image %q still names %s (build a new one with herd image build)", f.Metadata.Name, f.Spec.Image, f.BootImage())
	}
	return fmt.Sprintf("fleet/%s restarted: spec.image %q now names %s (was %s); rolling out", f.Metadata.Name, f.Spec.Image, f.BootImage(), res.Previous)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
