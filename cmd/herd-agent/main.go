// Command herd-agent boots and runs one instance's Kubernetes. Providers start it inside each
// instance; users do not run it by hand.
//
// It is a binary of its own, not a command of herd, because every package a Go binary links runs
// its initialisation and brings its code into every process of it: herd links Helm, Kustomize and
// the image builder for `herd image build`, and the agent, which runs once per instance, would
// carry them in each instance's memory for nothing.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agentauth"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		stop()
		os.Exit(1)
	}
}

func newCommand() *cobra.Command {
	cfg := agent.Config{}
	var logLevel, credentialFile string
	var onEC2 ec2Flags
	var discovery agent.Discovery
	cmd := &cobra.Command{
		Use:   "herd-agent --name NAME --bundle DIR --state-dir DIR --address IP --credential-file FILE | --ec2 --state-dir DIR",
		Short: "Boot and run one instance's Kubernetes (providers start it; not for use by hand)",
		Long: `Providers start herd-agent inside each instance; users do not run it by hand.

The agent boots the instance's one-node Kubernetes from the node image bundle in --bundle:
the container runtime, etcd and the API server (on --address only), then the controller manager,
scheduler, kubelet and kube-proxy; it imports the bundle's images, applies its manifests with
server-side apply, and reports Ready once the node is Ready and every Deployment, StatefulSet and
DaemonSet of the bundle is available. It fails the instance if that takes longer than
--ready-timeout, or if a component exits.

It must run as root in a mount namespace of its own (the local provider starts it with one); it
moves itself into <--cgroup-root>/system so that everything of the instance is in that cgroup.
It writes <state-dir>/status.json on every change and <state-dir>/kubeconfig (an administrator
kubeconfig), and serves GET /readyz, /livez and /metrics on <address>:<port>, only to requests
that carry the instance's credential (--credential-file). On SIGTERM or SIGINT
it stops the workload gracefully, then the cluster, and exits 0; a failed instance exits 1.`,
		Example: `  # on an EC2 instance of herd's aws provider (the AMI starts it at boot)
  herd-agent --ec2 --state-dir /var/lib/herd/agent

  # what the local provider runs, inside the instance's network namespace
  herd-agent --name web-1 --bundle /var/lib/herd/images/bundles/3f2a... \
    --state-dir /var/lib/herd/providers/local/instances/web-1/agent \
    --address 10.213.0.11 --cgroup-root /herd-web-1 \
    --credential-file /var/lib/herd/providers/local/instances/web-1/credential`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := newLogger(logLevel)
			if err != nil {
				return err
			}
			if credentialFile != "" {
				c, err := agentauth.ReadCredentialFile(credentialFile)
				if err != nil {
					return fmt.Errorf("--credential-file: %w", err)
				}
				cfg.Credential = c
			}
			ctx := cmd.Context()
			if onEC2.on {
				md, err := onEC2.fromEC2(ctx, &cfg)
				if err != nil {
					return err
				}
				var stop context.CancelCauseFunc
				ctx, stop = context.WithCancelCause(ctx)
				defer stop(nil)
				go stopOnInterruption(ctx, md, stop, log.With("component", "agent", "instance", cfg.Name))
			}
			if discovery.Zone != "" || discovery.Server.IsValid() {
				cfg.Discovery = &discovery
			}
			cfg.Logger = log.With("component", "agent", "instance", cfg.Name)
			// The agent is counted in the instance's memory: keep its heap small.
			debug.SetGCPercent(50)
			return agent.Run(ctx, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.StringVar(&cfg.Name, "name", "", "the instance's name, also its node name (a DNS label)")
	f.StringVar(&cfg.BundleDir, "bundle", "", "the node image bundle directory to boot from")
	f.StringVar(&cfg.StateDir, "state-dir", "", "directory for everything the agent and the cluster write")
	f.TextVar(&cfg.Address, "address", netip.Addr{}, "the instance's `IP` address: the API server, the kubelet and the agent listen on it")
	f.StringVar(&cfg.CgroupRoot, "cgroup-root", "", "cgroup to confine the instance to (e.g. /herd-NAME); pods go under <root>/kubepods. Default: none")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", agent.DefaultReadyTimeout, "fail the instance if it is not Ready this long after the agent starts")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", agent.DefaultStopTimeout, "on SIGTERM, how long the workload's pods get to stop before the cluster is stopped")
	f.IntVar(&cfg.Port, "port", agent.DefaultPort, "port of the agent's HTTP endpoints on --address")
	f.BoolVar(&cfg.ImagesPreloaded, "images-preloaded", false, "the bundle's images are in containerd's store under --state-dir already (the local provider puts them there): neither check nor import their tars")
	f.BoolVar(&onEC2.on, "ec2", false, "on EC2: read the instance's name, address and credential and the bundle's digest from the instance metadata (IMDSv2) and user data, and stop gracefully on a spot interruption notice")
	f.StringVar(&onEC2.endpoint, "imds-endpoint", "", "with --ec2, the instance metadata service's URL. Default: EC2's own (http://169.254.169.254)")
	f.StringVar(&onEC2.imagesDir, "images-dir", "/var/lib/herd/images", "with --ec2, the image store on the AMI that holds the bundle the user data names")
	f.StringVar(&credentialFile, "credential-file", "", "file holding the instance's credential: the agent's endpoints answer only requests that carry it")
	f.StringVar(&discovery.Zone, "discovery-zone", "", "with --discovery-dns, the zone (e.g. herd.internal.) the cluster DNS forwards to herd's discovery DNS, so that workloads resolve NAME.<zone> to other fleets. Default: none")
	f.TextVar(&discovery.Server, "discovery-dns", netip.AddrPort{}, "herd's discovery DNS as the instance reaches it (`IP:port`), with --discovery-zone")
	cmd.AddCommand(newMachineCommand())
	return cmd
}

// newLogger logs text to stderr from the --log-level given.
func newLogger(level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %q is not one of debug, info, warn, error", level)
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})), nil
}
