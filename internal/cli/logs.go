package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
)

func newLogsCmd(g *globals) *cobra.Command {
	var q apiserver.LogQuery
	var output string
	cmd := &cobra.Command{
		Use:   "logs INSTANCE|fleet/NAME",
		Short: "Print the logs of an instance's pods, or of every instance of a fleet",
		Long: `Print the logs of an instance's pods (by default every pod outside kube-system), read
through herd up from the instance's Kubernetes. With fleet/NAME, the logs of every instance of the
fleet, each line prefixed by its instance, interleaved as they come. -o json prints one JSON object
per line with fleet, region, revision, instance, namespace, pod, container, time and message.`,
		Example: `  herd logs hello-7f9c2-abcde
  herd logs hello-7f9c2-abcde --pod hello-5d8f6b7c9-xk2lp -c hello --tail 20
  herd logs fleet/hello -f --since 5m
  herd logs fleet/hello -o json | my-log-shipper`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output != "" && output != "json" {
				return fmt.Errorf("-o %q: want json, or nothing for text", output)
			}
			if q.Tail < -1 {
				return fmt.Errorf("--tail %d: want a number of lines, or -1 for all", q.Tail)
			}
			if q.Since < 0 {
				return fmt.Errorf("--since %s: want a positive duration such as 5m", q.Since)
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			p := &logPrinter{out: g.out, errOut: g.errOut, json: output == "json", podPrefix: q.Pod == ""}
			fleet, ok := strings.CutPrefix(args[0], "fleet/")
			if !ok {
				return c.Logs(cmd.Context(), args[0], q, p.print)
			}
			p.instancePrefix = true
			return fleetLogs(cmd.Context(), c, fleet, q, p)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&q.Container, "container", "c", "", "only this container of each pod (default: all)")
	f.StringVar(&q.Pod, "pod", "", "only this pod, NAME or NAMESPACE/NAME (default: every pod outside kube-system)")
	f.BoolVarP(&q.Follow, "follow", "f", false, "keep printing new lines until Ctrl-C or the instance is deleted; with fleet/NAME, also of the instances that start later")
	f.DurationVar(&q.Since, "since", 0, "only lines newer than this, e.g. 5m (default: all)")
	f.Int64Var(&q.Tail, "tail", -1, "only the last N lines of each container (-1: all)")
	f.StringVarP(&output, "output", "o", "", "json: one JSON object per line, for log shippers")
	return cmd
}

// followInterval is how often `herd logs fleet/NAME -f` looks for instances of the fleet that
// became Ready since it started: one list of the fleet's instances, cheap next to the streams.
var followInterval = 5 * time.Second

// fleetLogs prints the logs of every instance of fleet at once. An instance whose logs cannot be
// read is reported and the others go on; it fails only when none could be read. With Follow it
// also follows the instances that become Ready later (scale-out, healing, a rollout), until
// ctx ends or the fleet is deleted.
func fleetLogs(ctx context.Context, c *client.Client, fleet string, q apiserver.LogQuery, p *logPrinter) error {
	if _, err := c.GetFleet(ctx, fleet); err != nil {
		if client.IsNotFound(err) {
			return fmt.Errorf("fleet %q not found: see herd get fleets", fleet)
		}
		return err
	}
	insts, err := c.ListInstances(ctx, fleet)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	read := 0
	started := map[string]bool{}
	start := func(name string) {
		started[name] = true
		wg.Go(func() {
			err := c.Logs(ctx, name, q, p.print)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				p.warn("instance %s: %v", name, err)
				return
			}
			read++
		})
	}
	for _, in := range insts {
		if in.Status.Phase != v1alpha1.PhasePending {
			start(in.Metadata.Name)
		}
	}
	if len(started) == 0 && !q.Follow {
		return fmt.Errorf("fleet %s has no instances running yet: see herd get instances --fleet %s", fleet, fleet)
	}
	if q.Follow {
		followNewInstances(ctx, c, fleet, p, started, start)
	}
	wg.Wait()
	if read > 0 || (q.Follow && ctx.Err() != nil) {
		return nil
	}
	if len(errs) == 0 {
		return fmt.Errorf("fleet %s was deleted", fleet)
	}
	return fmt.Errorf("no instance of fleet %s gave its logs: %w", fleet, errors.Join(errs...))
}

// followNewInstances lists the fleet's instances every followInterval and starts following each
// Ready one not started yet (its Kubernetes API answers once it is Ready), until ctx ends or the
// fleet is gone.
func followNewInstances(ctx context.Context, c *client.Client, fleet string, p *logPrinter, started map[string]bool, start func(string)) {
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		insts, err := c.ListInstances(ctx, fleet)
		if err != nil {
			if ctx.Err() == nil {
				p.warn("list the instances of fleet %s: %v", fleet, err)
			}
			continue
		}
		if len(insts) == 0 {
			if _, err := c.GetFleet(ctx, fleet); client.IsNotFound(err) {
				return
			}
		}
		for _, in := range insts {
			if in.Status.Phase == v1alpha1.PhaseReady && !started[in.Metadata.Name] {
				start(in.Metadata.Name)
			}
		}
	}
}

// logPrinter prints log lines from any number of goroutines, one whole line at a time.
type logPrinter struct {
	out, errOut    io.Writer
	json           bool
	instancePrefix bool // lines of several instances: say which
	podPrefix      bool // lines of several pods: say which
	mu             sync.Mutex
}

func (p *logPrinter) print(l apiserver.LogLine) {
	if l.Error != "" {
		p.warn("%s %s/%s: its log stopped: %s", l.Instance, l.Pod, l.Container, l.Error)
		return
	}
	var b strings.Builder
	switch {
	case p.json:
		data, _ := json.Marshal(l)
		b.Write(data)
	default:
		if p.instancePrefix {
			b.WriteString(l.Instance + " ")
		}
		if p.podPrefix {
			b.WriteString(l.Pod + "/" + l.Container + " ")
		}
		b.WriteString(l.Message)
	}
	b.WriteByte('\n')
	p.mu.Lock()
	defer p.mu.Unlock()
	io.WriteString(p.out, b.String())
}

func (p *logPrinter) warn(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.errOut, "warning: "+format+"\n", args...)
}
