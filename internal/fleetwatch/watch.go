// Package fleetwatch follows the store's fleets and instances: it lists them, then applies every
// change its watches report, handing each batch of changes to a callback with the whole view.
// The configurations derived from the records (a standby's load balancer, the regional load
// balancers, the front door) are computed from it.
package fleetwatch

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// View is what the watches know: every fleet and every fleet's instance records. It belongs to
// the Run that made it: read it only inside the apply callback.
type View struct {
	fleets    map[string]*v1alpha1.Fleet
	instances map[string]map[string]*v1alpha1.Instance // fleet -> name -> record
}

// Run lists fleets and instances, then follows their watches until ctx ends, calling apply with
// what it knows and the fleets changed since the last call (all of them after each listing). A
// watch that ends, or a store that cannot answer, makes it list again after a second: apply keeps
// what it applied meanwhile. A tick, when not nil, calls apply with nothing changed, for an apply
// that must also repeat itself (a remote load balancer that restarted).
func Run(ctx context.Context, st store.Store, log *slog.Logger, tick <-chan time.Time, apply func(v *View, dirty map[string]bool)) {
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

// follow lists fleets and instances, applies them, then applies every change its watches report
// until one ends.
func follow(ctx context.Context, st store.Store, tick <-chan time.Time, apply func(*View, map[string]bool)) error {
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
	f := &View{fleets: map[string]*v1alpha1.Fleet{}, instances: map[string]map[string]*v1alpha1.Instance{}}
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
func (f *View) next(ctx context.Context, fw, iw <-chan store.Event, tick <-chan time.Time, dirty map[string]bool, block bool) (bool, error) {
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

func (f *View) setInstance(in *v1alpha1.Instance) {
	m := f.instances[in.Spec.Fleet]
	if m == nil {
		m = map[string]*v1alpha1.Instance{}
		f.instances[in.Spec.Fleet] = m
	}
	m[in.Metadata.Name] = in
}

func (f *View) fleetEvent(ev store.Event, dirty map[string]bool) error {
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

func (f *View) instanceEvent(ev store.Event, dirty map[string]bool) error {
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

// Fleet returns a fleet, its instance records sorted by name and the weights of its rollout in
// progress (nil when none), or false when the store has no such fleet.
func (f *View) Fleet(name string) (*v1alpha1.Fleet, []*v1alpha1.Instance, map[string]int32, bool) {
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

// Names returns the fleets' names, sorted.
func (f *View) Names() []string {
	names := make([]string, 0, len(f.fleets))
	for n := range f.fleets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Has reports whether the store has the fleet.
func (f *View) Has(name string) bool {
	_, ok := f.fleets[name]
	return ok
}

// Fleets returns every fleet, in no order.
func (f *View) Fleets() []*v1alpha1.Fleet {
	out := make([]*v1alpha1.Fleet, 0, len(f.fleets))
	for _, fl := range f.fleets {
		out = append(out, fl)
	}
	return out
}
