// Package fleetwatch follows the fleets and instances of the control plane's shared cache
// (internal/informer), handing each batch of changes to a callback with the whole view. The
// configurations derived from the records (a standby's load balancer, the regional load
// balancers, the front door) are computed from it.
package fleetwatch

import (
	"context"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/informer"
)

// View is the cache's fleets and their instance records. Its objects are shared: read them,
// never modify them.
type View struct {
	inf *informer.Informer
}

// Run waits for the informer to list the fleets and instances, calls apply with every fleet
// changed, then, until ctx ends, calls it again with the fleets whose record or instance records
// changed since the last call, once per batch of changes. While the store cannot answer, the
// informer keeps what it holds and apply is not called. A tick, when not nil, calls apply with
// nothing changed, for an apply that must also repeat itself (a remote load balancer that
// restarted).
func Run(ctx context.Context, inf *informer.Informer, tick <-chan time.Time, apply func(v *View, dirty map[string]bool)) {
	var changes changed
	changes.wake = make(chan struct{}, 1)
	defer inf.AddHandler(informer.Handler{
		Fleet: func(old, new *v1alpha1.Fleet) {
			changes.mark(either(old, new).Metadata.Name)
		},
		Instance: func(old, new *v1alpha1.Instance) {
			if old != nil {
				changes.mark(old.Spec.Fleet)
			}
			if new != nil {
				changes.mark(new.Spec.Fleet)
			}
		},
	})()
	if inf.WaitForSync(ctx) != nil {
		return
	}
	v := &View{inf: inf}
	apply(v, changes.take())
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes.wake:
			if dirty := changes.take(); len(dirty) > 0 { // else applied with an earlier wake's
				apply(v, dirty)
			}
		case <-tick:
			apply(v, map[string]bool{})
		}
	}
}

// changed collects the fleets changed between two applies; the informer's handlers mark them and
// return at once.
type changed struct {
	mu    sync.Mutex
	dirty map[string]bool
	wake  chan struct{}
}

func (c *changed) mark(fleet string) {
	c.mu.Lock()
	if c.dirty == nil {
		c.dirty = map[string]bool{}
	}
	c.dirty[fleet] = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *changed) take() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	dirty := c.dirty
	c.dirty = nil
	if dirty == nil {
		dirty = map[string]bool{}
	}
	return dirty
}

func either[T any](old, new *T) *T {
	if new != nil {
		return new
	}
	return old
}

// Fleet returns a fleet, its instance records sorted by name and the weights of its rollout in
// progress (nil when none), or false when the store has no such fleet.
func (v *View) Fleet(name string) (*v1alpha1.Fleet, []*v1alpha1.Instance, map[string]int32, bool) {
	fl, ok := v.inf.Fleet(name)
	if !ok {
		return nil, nil, nil, false
	}
	var weights map[string]int32
	if ro := fl.Status.Rollout; ro.InProgress() {
		weights = ro.Weights
	}
	return fl, v.inf.Instances(name), weights, true
}

// Names returns the fleets' names, sorted.
func (v *View) Names() []string {
	fleets := v.inf.Fleets()
	names := make([]string, 0, len(fleets))
	for _, fl := range fleets { // sorted by name
		names = append(names, fl.Metadata.Name)
	}
	return names
}

// Has reports whether the store has the fleet.
func (v *View) Has(name string) bool {
	_, ok := v.inf.Fleet(name)
	return ok
}

// Fleets returns every fleet, in no order.
func (v *View) Fleets() []*v1alpha1.Fleet {
	return v.inf.Fleets()
}

// Instances yields the instance records of every fleet, including those whose fleet is gone.
func (v *View) Instances(yield func(*v1alpha1.Instance) bool) {
	for _, fleet := range v.inf.InstanceFleets() {
		for _, in := range v.inf.Instances(fleet) {
			if !yield(in) {
				return
			}
		}
	}
}
