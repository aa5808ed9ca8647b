package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete fleet NAME",
		Short: "Delete a fleet and, through the controller, all of its instances",
		Long: `Delete a fleet. The controller then drains and deletes every instance of it; watch the
progress with 'herd get instances --fleet NAME' or 'herd events'.`,
		Example: `  herd delete fleet hello`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if resource(args[0]) != "fleet" {
				return fmt.Errorf("delete knows fleets only (got %q)", args[0])
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteFleet(cmd.Context(), args[1]); err != nil {
				return err
			}
			fmt.Fprintf(g.out, "fleet/%s deleted\n", args[1])
			return nil
		},
	}
}
