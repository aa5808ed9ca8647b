package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/kubebin"
	"herd.dev/herd/internal/version"
)

func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the client's version and, if it is reachable, the control plane's and which replica leads it",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			fmt.Fprintf(g.out, "Client Version: %s (Kubernetes %s)\n", version.Version, kubebin.Version)
			c, err := g.client()
			if err != nil {
				fmt.Fprintln(g.out, "Server Version: <no client config: start herd up>")
				return nil
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 3*time.Second)
			defer cancel()
			v, err := c.Version(ctx)
			if err != nil {
				fmt.Fprintf(g.out, "Server Version: <unreachable: %v>\n", err)
				return nil
			}
			fmt.Fprintf(g.out, "Server Version: %s\n", v)
			// Replicas on a shared etcd say which of them runs the controller.
			if st, err := c.Status(ctx); err == nil && st["leader"] != "" {
				fmt.Fprintf(g.out, "Controller Leader: %s\n", st["leader"])
				fmt.Fprintf(g.out, "Answered By: %s (%s)\n", st["replica"], st["role"])
			}
			return nil
		},
	}
}
