package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
)

// rewatchDelay spaces the watches of herd wait when the API ends one early (its store dropped a
// watcher that fell behind), so that a server that keeps ending them is not asked in a loop.
const rewatchDelay = 250 * time.Millisecond

func newWaitCmd(g *globals) *cobra.Command {
	var fors []string
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "wait fleet/NAME --for condition=TYPE[=STATUS] | --for delete",
		Short: "Wait until a fleet has conditions, or is deleted (for scripts and CI)",
		Long: `wait follows the fleet through the API's watch until every --for holds, like kubectl wait.
A condition holds when the fleet's status reports it with the status given (default True) for the
fleet's current spec generation; condition types are Ready, Available, Progressing,
LoadBalancerReady and Degraded. It exits 0 when met, and non-zero with the fleet's state when the
timeout passes first or the fleet is deleted meanwhile. --for delete waits for the fleet to be gone.`,
		Example: `  herd apply -f fleet.yaml && herd wait fleet/hello --for condition=Ready --timeout 5m
  herd wait fleet/hello --for condition=Degraded=False
  herd delete fleet hello && herd wait fleet/hello --for delete`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			kind, name, ok := strings.Cut(args[0], "/")
			if !ok || resource(kind) != "fleet" || name == "" {
				return fmt.Errorf("wait takes fleet/NAME (got %q)", args[0])
			}
			w, err := parseWaitFor(fors)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			msg, err := w.run(cmd.Context(), c, name, timeout)
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "fleet/%s %s\n", name, msg)
			return nil
		},
	}
	cmd.Flags().StringArrayVar(&fors, "for", nil, "condition=TYPE[=STATUS] (repeat: all must hold) or delete")
	cmd.Flags().DurationVar(&timeout, "timeout", 30*time.Second, "how long to wait; 0 checks once, a negative value waits without end")
	return cmd
}

// wanted is one condition herd wait waits for.
type wanted struct{ typ, status string }

func (c wanted) String() string { return "condition=" + c.typ + "=" + c.status }

// waitFor is what herd wait waits for: the fleet's deletion, or all of conds.
type waitFor struct {
	delete bool
	conds  []wanted
}

func parseWaitFor(fors []string) (waitFor, error) {
	var w waitFor
	for _, f := range fors {
		if f == "delete" {
			w.delete = true
			continue
		}
		spec, ok := strings.CutPrefix(f, "condition=")
		typ, status, hasStatus := strings.Cut(spec, "=")
		if !hasStatus {
			status = string(metav1.ConditionTrue)
		}
		if !ok || typ == "" || !slices.ContainsFunc([]string{"True", "False", "Unknown"}, func(s string) bool { return strings.EqualFold(s, status) }) {
			return w, fmt.Errorf("--for %q: use condition=TYPE[=True|False|Unknown], e.g. condition=Ready, or delete", f)
		}
		w.conds = append(w.conds, wanted{typ, status})
	}
	switch {
	case !w.delete && len(w.conds) == 0:
		return w, errors.New("--for is required: condition=TYPE[=STATUS] or delete")
	case w.delete && len(w.conds) > 0:
		return w, errors.New("--for delete cannot be combined with conditions: wait for one, then the other")
	}
	return w, nil
}

// unmet returns, for each wanted condition f does not have, what it has instead; nil when all
// hold. A condition counts only when it describes the fleet's current spec generation.
func (w waitFor) unmet(f *v1alpha1.Fleet) []string {
	var out []string
	for _, want := range w.conds {
		var c *metav1.Condition
		for i := range f.Status.Conditions {
			if strings.EqualFold(f.Status.Conditions[i].Type, want.typ) {
				c = &f.Status.Conditions[i]
			}
		}
		switch {
		case c == nil:
			out = append(out, fmt.Sprintf("%s is not reported yet", want.typ))
		case c.ObservedGeneration < f.Metadata.Generation:
			out = append(out, fmt.Sprintf("%s describes generation %d, the spec is at %d", c.Type, c.ObservedGeneration, f.Metadata.Generation))
		case !strings.EqualFold(string(c.Status), want.status):
			out = append(out, fmt.Sprintf("%s is %s (%s: %s)", c.Type, c.Status, c.Reason, c.Message))
		}
	}
	return out
}

// run waits for w on the fleet name and returns what to print when it holds.
func (w waitFor) run(ctx context.Context, c *client.Client, name string, timeout time.Duration) (string, error) {
	if timeout == 0 {
		return w.checkOnce(ctx, c, name)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var last *v1alpha1.Fleet
	deleted := false
	for {
		err := c.WatchFleet(ctx, name, func(ev apiserver.FleetEvent) bool {
			last, deleted = ev.Fleet, ev.Type == apiserver.WatchDeleted
			if w.delete || deleted {
				return deleted
			}
			return w.unmet(ev.Fleet) == nil
		})
		switch {
		case err == nil && w.delete:
			return "deleted", nil
		case err == nil && !deleted:
			return "condition met", nil
		case deleted || (client.IsNotFound(err) && last != nil):
			return "", fmt.Errorf("fleet/%s was deleted while waiting for %s", name, w.describe())
		case client.IsNotFound(err) && w.delete:
			return "deleted", nil
		case client.IsNotFound(err):
			return "", fmt.Errorf("fleet %q not found: nothing to wait for (see herd get fleets)", name)
		case errors.Is(err, context.DeadlineExceeded):
			state := "it was never read"
			if last != nil {
				state = strings.Join(w.unmet(last), "; ")
				if w.delete {
					state = "it still exists"
				}
			}
			return "", fmt.Errorf("timed out after %s waiting for fleet/%s %s: %s", timeout, name, w.describe(), state)
		case errors.Is(err, client.ErrWatchEnded):
			select {
			case <-ctx.Done():
			case <-time.After(rewatchDelay):
			}
		default:
			return "", err
		}
	}
}

// checkOnce is herd wait --timeout 0: one read, and an error when w does not hold.
func (w waitFor) checkOnce(ctx context.Context, c *client.Client, name string) (string, error) {
	f, err := c.GetFleet(ctx, name)
	switch {
	case client.IsNotFound(err) && w.delete:
		return "deleted", nil
	case err != nil:
		return "", err
	case w.delete:
		return "", fmt.Errorf("fleet/%s still exists", name)
	}
	if unmet := w.unmet(f); unmet != nil {
		return "", fmt.Errorf("fleet/%s does not meet %s: %s", name, w.describe(), strings.Join(unmet, "; "))
	}
	return "condition met", nil
}

func (w waitFor) describe() string {
	if w.delete {
		return "deletion"
	}
	parts := make([]string, len(w.conds))
	for i, c := range w.conds {
		parts[i] = c.String()
	}
	return strings.Join(parts, " and ")
}
