package dns

import (
	"context"
	"log/slog"
	"time"

	"herd.dev/herd/internal/global/routes"
)

// Follow keeps s answering from the latest table fetch returns, every interval until ctx is done.
// When fetch fails (the control plane is down or unreachable) the server keeps answering from the
// last table it had, as Route 53's name servers keep answering when its control plane does not;
// the first failure and the recovery are logged, not every retry.
func Follow(ctx context.Context, s *Server, fetch func(context.Context) (routes.Table, error), interval time.Duration, log *slog.Logger) {
	failing := false
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		fctx, cancel := context.WithTimeout(ctx, max(interval, time.Second))
		table, err := fetch(fctx)
		cancel()
		switch {
		case err != nil && ctx.Err() == nil && !failing:
			failing = true
			log.Warn("cannot fetch routes: answering from the last ones", "err", err)
		case err == nil:
			if failing {
				failing = false
				log.Info("fetching routes again")
			}
			s.Update(table)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
