package cli

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
)

func newScaleCmd(g *globals) *cobra.Command {
	replicas := int32(-1)
	cmd := &cobra.Command{
		Use:     "scale fleet NAME --replicas N",
		Short:   "Set a fleet's desired number of instances (within its min and max)",
		Example: `  herd scale fleet hello --replicas 5`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if resource(args[0]) != "fleet" {
				return fmt.Errorf("scale knows fleets only (got %q)", args[0])
			}
			if !cmd.Flags().Changed("replicas") {
				return errors.New("--replicas is required")
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.Scale(cmd.Context(), args[1], replicas); err != nil {
				return err
			}
			fmt.Fprintf(g.out, "fleet/%s scaled to %d\n", args[1], replicas)
			return nil
		},
	}
	cmd.Flags().Int32Var(&replicas, "replicas", -1, "desired number of instances")
	return cmd
}
