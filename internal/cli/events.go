package cli

import (
	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
)

func newEventsCmd(g *globals) *cobra.Command {
	var fleet string
	var watch bool
	var limit int
	cmd := &cobra.Command{
		Use:   "events",
		Short: "List what happened to fleets and instances, oldest first",
		Example: `  herd events
  herd events --fleet hello --watch`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			object := ""
			if fleet != "" {
				object = "Fleet/" + fleet
			}
			if watch {
				t := newTable(g.out, "TIME", "TYPE", "REASON", "OBJECT", "MESSAGE")
				_ = t.flush()
				return c.WatchEvents(cmd.Context(), object, limit, func(e v1alpha1.Event) {
					t.row(e.Time.Local().Format("15:04:05"), e.Type, e.Reason, e.Object, e.Message)
					_ = t.flush()
				})
			}
			evs, err := c.ListEvents(cmd.Context(), object, limit)
			if err != nil {
				return err
			}
			if len(evs) == 0 {
				g.errOut.Write([]byte("No events found.\n"))
				return nil
			}
			t := newTable(g.out, "AGE", "TYPE", "REASON", "OBJECT", "MESSAGE")
			for _, e := range evs {
				t.row(age(&e.Time), e.Type, e.Reason, e.Object, e.Message)
			}
			return t.flush()
		},
	}
	cmd.Flags().StringVar(&fleet, "fleet", "", "only events of this fleet and its instances")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "keep printing new events until Ctrl-C")
	cmd.Flags().IntVar(&limit, "limit", 0, "show only the newest N events (0: all kept)")
	return cmd
}
