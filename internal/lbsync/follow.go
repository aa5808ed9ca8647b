package lbsync

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/chaos"
	"herd.dev/herd/internal/fleetwatch"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/store"
)

// Follow configures the load balancer from the store until ctx ends: the fleets and their
// instance records (from inf, the control plane's cache) as the leading replica's controller
// wrote them, with a rollout's weights from the fleet's status. A herd up replica that does not
// run the controller runs it, so that its load balancer serves what the leader decided, and keeps
// serving it (its last configuration) when the leader dies or the store cannot answer; the
// leader's own controller drives the load balancer directly, and Follow must not run at the same
// time.
//
// The fleets whose health checks are paused (herd chaos pause-health) come from the store too:
// the leader's chaos engine tells its own load balancer, and Follow reads the same actions.
//
// What the leader's controller tells its load balancer and what Follow computes from the records
// agree, because both are Listeners of the same fleet, records and weights: a replica that becomes
// leader, or stops leading, switches between the two without a change of configuration.
func (s *Sync) Follow(ctx context.Context, st store.Store, inf *informer.Informer) error {
	paused := make(chan struct{})
	go func() {
		defer close(paused)
		s.followPaused(ctx, st)
	}()
	defer func() { <-paused }()
	fleetwatch.Run(ctx, inf, nil, func(v *fleetwatch.View, dirty map[string]bool) {
		for _, name := range s.fleetNames() {
			if !v.Has(name) {
				dirty[name] = true // a fleet deleted while this replica led, or before it started
			}
		}
		s.applyFollowed(v, dirty)
	})
	return nil
}

// applyFollowed gives the load balancer the fleets named in dirty as the store has them.
func (s *Sync) applyFollowed(v *fleetwatch.View, dirty map[string]bool) {
	for name := range dirty {
		fl, insts, weights, ok := v.Fleet(name)
		if !ok {
			s.RemoveFleet(name)
			continue
		}
		s.SetFleetTargets(fl, insts, weights)
	}
}

// fleetNames returns the fleets the load balancer is configured for.
func (s *Sync) fleetNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.fleets))
	for n := range s.fleets {
		names = append(names, n)
	}
	return names
}

// followPaused keeps the paused health checks as the store's chaos actions say (chaos.PausedFleets)
// until ctx ends: it lists them, then applies every change its watch reports, and lists again
// after a second when the watch ends or the store cannot answer, keeping what it applied.
func (s *Sync) followPaused(ctx context.Context, st store.Store) {
	const retry = time.Second
	for ctx.Err() == nil {
		err := s.watchPaused(ctx, st)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("following the chaos actions: paused health checks stay as they are; listing again", "err", err, "retry_in", retry.String())
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

func (s *Sync) watchPaused(ctx context.Context, st store.Store) error {
	list, rev, err := store.ListObjects[v1alpha1.ChaosAction](ctx, st, chaos.Kind)
	if err != nil {
		return err
	}
	actions := map[string]*v1alpha1.ChaosAction{}
	for _, a := range list {
		actions[a.Metadata.Name] = a
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := st.Watch(wctx, chaos.Kind, rev)
	if err != nil {
		return err
	}
	for {
		s.SetHealthPaused(chaos.PausedFleets(slices.Collect(maps.Values(actions))))
		ev, ok := <-ch
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("watch of chaos actions ended")
		}
		if ev.Type == store.Deleted {
			delete(actions, ev.Record.Name)
			continue
		}
		a, err := store.DecodeRecord[v1alpha1.ChaosAction](ev.Record)
		if err != nil {
			return err
		}
		actions[a.Metadata.Name] = a
	}
}
