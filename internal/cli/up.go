package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/controlplane"
)

func newUpCmd(g *globals) *cobra.Command {
	opts := controlplane.Options{}
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the control plane (store, API, controller, load balancer) in the foreground",
		Long: `Run herd's control plane in the foreground until Ctrl-C: the embedded store, the API on
localhost, the controller that keeps every fleet at its desired state, and the load balancer that
serves every fleet's listeners from its healthy instances. The API also serves Prometheus
metrics (the load balancer's and the controller's) at /metrics, behind the same token.

On first start it generates an API token and writes the client config (server address and token,
mode 0600) that the other commands read. Instances keep running when the control plane stops; the
next 'herd up' adopts them.`,
		Example: `  herd up
  herd up --provider fake --data-dir /tmp/herd --listen 127.0.0.1:0`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			opts.Logger = log
			opts.ConfigPath = g.configPath
			opts.Ready = func(url string) {
				fmt.Fprintf(g.out, "herd control plane serving at %s (client config %s); Ctrl-C stops it\n", url, g.configPath)
			}
			return controlplane.Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.DataDir, "data-dir", controlplane.DefaultDataDir(), "directory for the store, the API token and provider state")
	cmd.Flags().StringVar(&opts.Listen, "listen", "127.0.0.1:7443", "address of the control-plane API (keep it on localhost)")
	cmd.Flags().StringVar(&opts.LBAddress, "lb-address", "127.0.0.1", "host the load balancer's fleet listeners bind on (0.0.0.0 to serve other machines)")
	cmd.Flags().StringVar(&opts.Provider, "provider", "local", fmt.Sprintf("default provider for regions that name none (%v)", controlplane.ProviderNames()))
	return cmd
}
