// Package cli is herd's command line. Commands are thin: they parse flags, call the client or a
// library, and print. Output follows kubectl's habits: aligned tables, ages, -o yaml|json|wide.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/client"
)

// globals are the flags every command has.
type globals struct {
	configPath string
	logLevel   string
	out        io.Writer
	errOut     io.Writer
}

// Execute runs the herd command line with os.Args and returns the process exit code.
func Execute() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cmd := NewRootCmd(os.Stdout, os.Stderr)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		return 1
	}
	return 0
}

// NewRootCmd builds the command tree writing to out and errOut.
func NewRootCmd(out, errOut io.Writer) *cobra.Command {
	g := &globals{out: out, errOut: errOut}
	root := &cobra.Command{
		Use:   "herd",
		Short: "Run applications as fleets of immutable one-node Kubernetes clusters",
		Long: `herd runs an application as a fleet of identical one-node Kubernetes clusters, each booted
from an image that already holds the workload, behind a health-checking load balancer.

Start the control plane with 'herd up', then describe a fleet in YAML and 'herd apply -f' it.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.PersistentFlags().StringVar(&g.configPath, "config", client.DefaultConfigPath(), "client config written by herd up (server address and token); env HERD_CONFIG")
	root.PersistentFlags().StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	root.AddCommand(
		newUpCmd(g),
		newApplyCmd(g),
		newGetCmd(g),
		newDescribeCmd(g),
		newScaleCmd(g),
		newRolloutCmd(g),
		newDeleteCmd(g),
		newEventsCmd(g),
		newLogsCmd(g),
		newKubeconfigCmd(g),
		newKubectlCmd(g),
		newTopCmd(g),
		newWaitCmd(g),
		newVersionCmd(g),
		newImageCmd(g),
		newLBCmd(g),
		newFrontCmd(g),
		newLinkRelayCmd(g),
		newChaosCmd(g),
		newDNSCmd(g),
		newEdgeCmd(g),
	)
	return root
}

// client loads the client config and returns an API client.
func (g *globals) client() (*client.Client, error) {
	cfg, err := client.LoadConfig(g.configPath)
	if err != nil {
		return nil, err
	}
	return client.New(cfg), nil
}

// logger returns a text logger on stderr at the chosen level.
func (g *globals) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", g.logLevel)
	}
	return slog.New(slog.NewTextHandler(g.errOut, &slog.HandlerOptions{Level: lvl})), nil
}
