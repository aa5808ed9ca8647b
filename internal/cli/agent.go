package cli

import (
	"net/netip"
	"runtime/debug"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/agent"
)

func newAgentCmd(g *globals) *cobra.Command {
	cfg := agent.Config{}
	cmd := &cobra.Command{
		Use:   "agent --name NAME --bundle DIR --state-dir DIR --address IP",
		Short: "Internal: boot and run one instance's Kubernetes (providers start it; not for use by hand)",
		Long: `INTERNAL COMMAND: providers start it inside each instance; users do not run it by hand.

The agent boots the instance's one-node Kubernetes from the node image bundle in --bundle:
the container runtime, etcd and the API server (on --address only), then the controller manager,
scheduler, kubelet and kube-proxy; it imports the bundle's images, applies its manifests with
server-side apply, and reports Ready once the node is Ready and every Deployment, StatefulSet and
DaemonSet of the bundle is available. It fails the instance if that takes longer than
--ready-timeout, or if a component exits.

It must run as root in a mount namespace of its own (the local provider starts it with one); it
moves itself into <--cgroup-root>/system so that everything of the instance is in that cgroup.
It writes <state-dir>/status.json on every change and <state-dir>/kubeconfig (an administrator
kubeconfig), and serves GET /readyz, /livez and /metrics on <address>:<port>. On SIGTERM or SIGINT
it stops the workload gracefully, then the cluster, and exits 0; a failed instance exits 1.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			cfg.Logger = log.With("component", "agent", "instance", cfg.Name)
			// The agent is counted in the instance's memory: keep its heap small.
			debug.SetGCPercent(50)
			return agent.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "", "the instance's name, also its node name (a DNS label)")
	f.StringVar(&cfg.BundleDir, "bundle", "", "the node image bundle directory to boot from")
	f.StringVar(&cfg.StateDir, "state-dir", "", "directory for everything the agent and the cluster write")
	f.TextVar(&cfg.Address, "address", netip.Addr{}, "the instance's `IP` address: the API server, the kubelet and the agent listen on it")
	f.StringVar(&cfg.CgroupRoot, "cgroup-root", "", "cgroup to confine the instance to (e.g. /herd-NAME); pods go under <root>/kubepods. Default: none")
	f.DurationVar(&cfg.ReadyTimeout, "ready-timeout", agent.DefaultReadyTimeout, "fail the instance if it is not Ready this long after the agent starts")
	f.DurationVar(&cfg.StopTimeout, "stop-timeout", agent.DefaultStopTimeout, "on SIGTERM, how long the workload's pods get to stop before the cluster is stopped")
	f.IntVar(&cfg.Port, "port", agent.DefaultPort, "port of the agent's HTTP endpoints on --address")
	return cmd
}
