package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "delete fleet|distribution NAME",
		Short: "Delete a fleet and, through the controller, all of its instances; or a distribution",
		Long: `Delete a fleet. The controller then drains and deletes every instance of it; watch the
progress with 'herd get instances --fleet NAME' or 'herd events'. Deleting a distribution stops its
edge locations.`,
		Example: `  herd delete fleet hello
  herd delete distribution site`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			switch resource(args[0]) {
			case "fleet":
				err = c.DeleteFleet(cmd.Context(), args[1])
			case "distribution":
				err = c.DeleteDistribution(cmd.Context(), args[1])
			default:
				return fmt.Errorf("delete knows fleets and distributions (got %q)", args[0])
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "%s/%s deleted\n", resource(args[0]), args[1])
			return nil
		},
	}
}
