package lbsync

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/chaos"
	"herd.dev/herd/internal/store"
)

// Follow configures the load balancer from the store until ctx ends: the fleets and their
// instance records as the leading replica's controller wrote them, with a rollout's weights from
// the fleet's status. A herd up replica that does not run the controller runs it, so that its
// load balancer serves what the leader decided, and keeps serving it (its last configuration) when
// the leader dies or the store cannot answer; the leader's own controller drives the load balancer
// directly, and Follow must not run at the same time.
//
// The fleets whose health checks are paused (herd chaos pause-health) come from the store too:
// the leader's chaos engine tells its own load balancer, and Follow reads the same actions.
//
// What the leader's controller tells its load balancer and what Follow computes from the records
// agree, because both are Listeners of the same fleet, records and weights: a replica that becomes
// leader, or stops leading, switches between the two without a change of configuration.
func (s *Sync) Follow(ctx context.Context, st store.Store) error {
	paused := make(chan struct{})
	go func() {
		defer close(paused)
		s.followPaused(ctx, st)
	}()
	defer func() { <-paused }()
	watchStore(ctx, st, s.log, nil, func(f *follower, dirty map[string]bool) {
		for _, name := range s.fleetNames() {
			if _, ok := f.fleets[name]; !ok {
				dirty[name] = true // a fleet deleted while this replica led, or before it started
			}
		}
		s.applyFollowed(f, dirty)
	})
	return nil
}

// watchStore lists fleets and instances, then follows their watches until ctx ends, calling
// apply with what it knows and the fleets changed since the last call (all of them after each
// listing). A watch that ends, or a store that cannot answer, makes it list again after a
// second: apply keeps what it applied meanwhile. A tick, when not nil, calls apply with nothing
// changed, for an apply that must also repeat itself (a remote load balancer that restarted).
func watchStore(ctx context.Context, st store.Store, log *slog.Logger, tick <-chan time.Time, apply func(f *follower, dirty map[string]bool)) {
	const retry = time.Second
	for ctx.Err() == nil {
		err := follow(ctx, st, tick, apply)
		if ctx.Err() != nil {
			break
		}
		log.Warn("following the store: the load balancer keeps its configuration; listing again", "err", err, "retry_in", retry.String())
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// follower is what Follow knows: every fleet and every fleet's instance records.
type follower struct {
	fleets    map[string]*v1alpha1.Fleet
	instances map[string]map[string]*v1alpha1.Instance // fleet -> name -> record
}

// follow lists fleets and instances, applies them, then applies every change its watches report
// until one ends.
func follow(ctx context.Context, st store.Store, tick <-chan time.Time, apply func(*follower, map[string]bool)) error {
	fleets, frev, err := store.ListObjects[v1alpha1.Fleet](ctx, st, store.Fleets)
	if err != nil {
		return err
	}
	insts, irev, err := store.ListObjects[v1alpha1.Instance](ctx, st, store.Instances)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fw, err := st.Watch(wctx, store.Fleets, frev)
	if err != nil {
		return err
	}
	iw, err := st.Watch(wctx, store.Instances, irev)
	if err != nil {
		return err
	}
	f := &follower{fleets: map[string]*v1alpha1.Fleet{}, instances: map[string]map[string]*v1alpha1.Instance{}}
	dirty := map[string]bool{}
	for _, fl := range fleets {
		f.fleets[fl.Metadata.Name] = fl
		dirty[fl.Metadata.Name] = true
	}
	for _, in := range insts {
		f.setInstance(in)
	}
	apply(f, dirty)
	for ctx.Err() == nil {
		// Wait for a change, take every change already waiting, then apply once per fleet touched.
		dirty = map[string]bool{}
		for block := true; ; block = false {
			got, err := f.next(ctx, fw, iw, tick, dirty, block)
			if err != nil {
				return err
			}
			if !got {
				break
			}
		}
		apply(f, dirty)
	}
	return nil
}

// next takes one change from the watches into f, waiting for one if block; it reports whether
// it took one. A watch that ends is an error: the caller lists again.
func (f *follower) next(ctx context.Context, fw, iw <-chan store.Event, tick <-chan time.Time, dirty map[string]bool, block bool) (bool, error) {
	var idle <-chan time.Time
	if !block {
		closed := make(chan time.Time)
		close(closed)
		idle = closed
	}
	select {
	case ev, ok := <-fw:
		if !ok {
			return false, fmt.Errorf("watch of fleets ended")
		}
		return true, f.fleetEvent(ev, dirty)
	case ev, ok := <-iw:
		if !ok {
			return false, fmt.Errorf("watch of instances ended")
		}
		return true, f.instanceEvent(ev, dirty)
	case <-tick:
		return !block, nil // a tick ends a wait with nothing changed
	case <-ctx.Done():
		return false, nil
	case <-idle:
		return false, nil
	}
}

func (f *follower) setInstance(in *v1alpha1.Instance) {
	m := f.instances[in.Spec.Fleet]
	if m == nil {
		m = map[string]*v1alpha1.Instance{}
		f.instances[in.Spec.Fleet] = m
	}
	m[in.Metadata.Name] = in
}

func (f *follower) fleetEvent(ev store.Event, dirty map[string]bool) error {
	dirty[ev.Record.Name] = true
	if ev.Type == store.Deleted {
		delete(f.fleets, ev.Record.Name)
		return nil
	}
	fl, err := store.DecodeRecord[v1alpha1.Fleet](ev.Record)
	if err != nil {
		return fmt.Errorf("fleet %s: %w", ev.Record.Name, err)
	}
	f.fleets[fl.Metadata.Name] = fl
	return nil
}

func (f *follower) instanceEvent(ev store.Event, dirty map[string]bool) error {
	in, err := store.DecodeRecord[v1alpha1.Instance](ev.Record)
	if err != nil {
		return fmt.Errorf("instance %s: %w", ev.Record.Name, err)
	}
	dirty[in.Spec.Fleet] = true
	if ev.Type == store.Deleted {
		delete(f.instances[in.Spec.Fleet], in.Metadata.Name)
		return nil
	}
	f.setInstance(in)
	return nil
}

// applyFollowed gives the load balancer the fleets named in dirty as the store has them.
func (s *Sync) applyFollowed(f *follower, dirty map[string]bool) {
	for name := range dirty {
		fl, insts, weights, ok := f.fleet(name)
		if !ok {
			s.RemoveFleet(name)
			continue
		}
		s.SetFleetTargets(fl, insts, weights)
	}
}

// fleet returns a fleet, its instance records by name and the weights of its rollout in
// progress (nil when none), or false when the store has no such fleet.
func (f *follower) fleet(name string) (*v1alpha1.Fleet, []*v1alpha1.Instance, map[string]int32, bool) {
	fl, ok := f.fleets[name]
	if !ok {
		return nil, nil, nil, false
	}
	insts := make([]*v1alpha1.Instance, 0, len(f.instances[name]))
	for _, in := range f.instances[name] {
		insts = append(insts, in)
	}
	sort.Slice(insts, func(i, j int) bool { return insts[i].Metadata.Name < insts[j].Metadata.Name })
	var weights map[string]int32
	if ro := fl.Status.Rollout; ro.InProgress() {
		weights = ro.Weights
	}
	return fl, insts, weights, true
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
