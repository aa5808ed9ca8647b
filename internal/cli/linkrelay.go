package cli

import (
	"github.com/spf13/cobra"
	"herd.dev/herd/internal/netlab"
)

// newLinkRelayCmd is `herd link-relay`: the process the local provider starts for every shaped
// link between a region (or a client network) and the internet namespace. It is not for users.
func newLinkRelayCmd(g *globals) *cobra.Command {
	var configFile string
	cmd := &cobra.Command{
		Use:    "link-relay --link-config FILE",
		Short:  "Carry the packets of a local region's link to the internet, shaped (started by the local provider)",
		Hidden: true,
		Long: `Carry every IP packet between the two TUN devices of one of the local provider's links,
delayed and dropped as the link's shape (latency, jitter, loss) says, until SIGTERM or until a
device goes away. SIGHUP re-reads the shape from the file. The local provider starts and stops
it; see docs/regions.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			return netlab.RunLinkRelay(cmd.Context(), configFile, log)
		},
	}
	cmd.Flags().StringVar(&configFile, "link-config", "", "the link's config file, written by the local provider (required)")
	_ = cmd.MarkFlagRequired("link-config")
	return cmd
}
