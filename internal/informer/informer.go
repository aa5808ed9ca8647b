// Package informer is herd's one shared, watch-fed cache of fleets and instances, an informer in
// client-go's sense on herd's store: it lists both kinds once, then follows their watches, lists
// again (and tells what changed meanwhile) when a watch ends, and can hand every object to its
// handlers again on a resync period. The control plane runs one; the controller, the route
// computation and the load balancers' configurations (lbsync's Follow, the regional load balancers
// and the front door, through internal/fleetwatch) read it and register handlers on it instead of
// each keeping a list/watch copy of their own.
//
// Objects handed out (by the reads and to handlers) are shared: read them, never modify them.
package informer

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Handler is told of changes. Either function may be nil. old is nil for an object added, new is
// nil for one deleted, and both are the same object on a resync. Handlers are called one change at
// a time, from the informer's goroutine, after the cache holds the change: they must return
// quickly (note the change, wake a worker) and must not call AddHandler.
type Handler struct {
	Fleet    func(old, new *v1alpha1.Fleet)
	Instance func(old, new *v1alpha1.Instance)
}

// Options configure an Informer.
type Options struct {
	Store store.Store
	// Resync, when positive, is how often every object is handed to the handlers again (as a change
	// from itself to itself), for handlers that must repeat what they do from time to time.
	Resync time.Duration
	// Retry is how long to wait before listing again after the store failed. Default: 1s.
	Retry  time.Duration
	Logger *slog.Logger
}

// Informer is the cache. Its zero value is not usable: call New.
type Informer struct {
	opts Options
	log  *slog.Logger

	// dispatch is held while a change is applied and handed to the handlers, and while a handler
	// is added, so that a new handler sees every object exactly once: in its replay or as a change.
	dispatch sync.Mutex
	handlers map[int]Handler
	nextID   int

	mu        sync.RWMutex
	fleets    map[string]*v1alpha1.Fleet
	instances map[string]*v1alpha1.Instance            // name -> record
	byFleet   map[string]map[string]*v1alpha1.Instance // fleet -> name -> record

	synced     chan struct{}
	syncedOnce sync.Once
}

// New returns an informer on opts.Store; Start fills it.
func New(opts Options) *Informer {
	if opts.Retry <= 0 {
		opts.Retry = time.Second
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Informer{
		opts: opts, log: log.With("component", "informer"),
		handlers: map[int]Handler{},
		fleets:   map[string]*v1alpha1.Fleet{}, instances: map[string]*v1alpha1.Instance{},
		byFleet: map[string]map[string]*v1alpha1.Instance{},
		synced:  make(chan struct{}),
	}
}

// AddHandler registers h and returns a function that removes it. Once the informer has synced, h
// is first handed every object it holds, as added.
func (i *Informer) AddHandler(h Handler) (remove func()) {
	i.dispatch.Lock()
	defer i.dispatch.Unlock()
	id := i.nextID
	i.nextID++
	i.handlers[id] = h
	if i.Synced() {
		i.replay(h, false)
	}
	return func() {
		i.dispatch.Lock()
		defer i.dispatch.Unlock()
		delete(i.handlers, id)
	}
}

// Synced reports whether the first listing is in the cache.
func (i *Informer) Synced() bool {
	select {
	case <-i.synced:
		return true
	default:
		return false
	}
}

// WaitForSync waits until the first listing is in the cache, or ctx ends.
func (i *Informer) WaitForSync(ctx context.Context) error {
	select {
	case <-i.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the fleets and instances to be listed: %w", ctx.Err())
	}
}

// Fleet returns one fleet, or false when the cache has none of that name.
func (i *Informer) Fleet(name string) (*v1alpha1.Fleet, bool) {
	i.mu.RLock()
	defer i.mu.RUnlock()
	f, ok := i.fleets[name]
	return f, ok
}

// Fleets returns every fleet, sorted by name.
func (i *Informer) Fleets() []*v1alpha1.Fleet {
	i.mu.RLock()
	out := make([]*v1alpha1.Fleet, 0, len(i.fleets))
	for _, f := range i.fleets {
		out = append(out, f)
	}
	i.mu.RUnlock()
	slices.SortFunc(out, func(a, b *v1alpha1.Fleet) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	return out
}

// Instances returns the instance records of one fleet, sorted by name.
func (i *Informer) Instances(fleet string) []*v1alpha1.Instance {
	i.mu.RLock()
	out := make([]*v1alpha1.Instance, 0, len(i.byFleet[fleet]))
	for _, in := range i.byFleet[fleet] {
		out = append(out, in)
	}
	i.mu.RUnlock()
	slices.SortFunc(out, func(a, b *v1alpha1.Instance) int { return cmp.Compare(a.Metadata.Name, b.Metadata.Name) })
	return out
}

// InstanceFleets returns the names of the fleets that have instance records, in no order.
func (i *Informer) InstanceFleets() []string {
	i.mu.RLock()
	defer i.mu.RUnlock()
	out := make([]string, 0, len(i.byFleet))
	for f := range i.byFleet {
		out = append(out, f)
	}
	return out
}

// Start lists and watches until ctx ends; it returns nil then. A watch that ends, or a store that
// cannot answer, makes it list again after Options.Retry: the cache keeps what it holds meanwhile,
// and the listing's differences reach the handlers as changes.
func (i *Informer) Start(ctx context.Context) error {
	for ctx.Err() == nil {
		err := i.listAndWatch(ctx)
		if ctx.Err() != nil {
			break
		}
		i.log.Warn("following the store: the cache keeps what it holds; listing again", "err", err, "retry_in", i.opts.Retry.String())
		select {
		case <-ctx.Done():
		case <-time.After(i.opts.Retry):
		}
	}
	return nil
}

// listAndWatch lists both kinds, hands the differences to the handlers, then applies every change
// the watches report until one ends.
func (i *Informer) listAndWatch(ctx context.Context) error {
	fleets, frev, err := store.ListObjects[v1alpha1.Fleet](ctx, i.opts.Store, store.Fleets)
	if err != nil {
		return fmt.Errorf("list fleets: %w", err)
	}
	insts, irev, err := store.ListObjects[v1alpha1.Instance](ctx, i.opts.Store, store.Instances)
	if err != nil {
		return fmt.Errorf("list instances: %w", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fw, err := i.opts.Store.Watch(wctx, store.Fleets, frev)
	if err != nil {
		return fmt.Errorf("watch fleets: %w", err)
	}
	iw, err := i.opts.Store.Watch(wctx, store.Instances, irev)
	if err != nil {
		return fmt.Errorf("watch instances: %w", err)
	}
	i.replace(fleets, insts)
	var resync <-chan time.Time
	if i.opts.Resync > 0 {
		t := time.NewTicker(i.opts.Resync)
		defer t.Stop()
		resync = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fw:
			if !ok {
				return fmt.Errorf("the watch of fleets ended")
			}
			if err := i.fleetEvent(ev); err != nil {
				return err
			}
		case ev, ok := <-iw:
			if !ok {
				return fmt.Errorf("the watch of instances ended")
			}
			if err := i.instanceEvent(ev); err != nil {
				return err
			}
		case <-resync:
			i.dispatch.Lock()
			for _, h := range i.handlers {
				i.replay(h, true)
			}
			i.dispatch.Unlock()
		}
	}
}

// replay hands h every object: as added, or, on a resync, as changed from itself to itself.
// i.dispatch is held.
func (i *Informer) replay(h Handler, resync bool) {
	if h.Fleet != nil {
		for _, f := range i.Fleets() {
			h.Fleet(old(f, resync), f)
		}
	}
	if h.Instance != nil {
		i.mu.RLock()
		insts := make([]*v1alpha1.Instance, 0, len(i.instances))
		for _, in := range i.instances {
			insts = append(insts, in)
		}
		i.mu.RUnlock()
		for _, in := range insts {
			h.Instance(old(in, resync), in)
		}
	}
}

func old[T any](obj *T, resync bool) *T {
	if resync {
		return obj
	}
	return nil
}

// replace makes a fresh listing the cache's content and hands what differs to the handlers.
func (i *Informer) replace(fleets []*v1alpha1.Fleet, insts []*v1alpha1.Instance) {
	i.dispatch.Lock()
	defer i.dispatch.Unlock()
	listed := make(map[string]bool, len(fleets))
	for _, f := range fleets {
		listed[f.Metadata.Name] = true
		if cur, ok := i.Fleet(f.Metadata.Name); !ok || cur.Metadata.ResourceVersion != f.Metadata.ResourceVersion {
			i.setFleet(f)
		}
	}
	for _, f := range i.Fleets() {
		if !listed[f.Metadata.Name] {
			i.deleteFleet(f.Metadata.Name)
		}
	}
	listed = make(map[string]bool, len(insts))
	for _, in := range insts {
		listed[in.Metadata.Name] = true
		i.mu.RLock()
		cur, ok := i.instances[in.Metadata.Name]
		i.mu.RUnlock()
		if !ok || cur.Metadata.ResourceVersion != in.Metadata.ResourceVersion {
			i.setInstance(in)
		}
	}
	i.mu.RLock()
	var gone []string
	for name := range i.instances {
		if !listed[name] {
			gone = append(gone, name)
		}
	}
	i.mu.RUnlock()
	for _, name := range gone {
		i.deleteInstance(name)
	}
	i.syncedOnce.Do(func() { close(i.synced) })
}

func (i *Informer) fleetEvent(ev store.Event) error {
	i.dispatch.Lock()
	defer i.dispatch.Unlock()
	if ev.Type == store.Deleted {
		i.deleteFleet(ev.Record.Name)
		return nil
	}
	f, err := store.DecodeRecord[v1alpha1.Fleet](ev.Record)
	if err != nil {
		return fmt.Errorf("fleet %s: %w", ev.Record.Name, err)
	}
	i.setFleet(f)
	return nil
}

func (i *Informer) instanceEvent(ev store.Event) error {
	i.dispatch.Lock()
	defer i.dispatch.Unlock()
	if ev.Type == store.Deleted {
		i.deleteInstance(ev.Record.Name)
		return nil
	}
	in, err := store.DecodeRecord[v1alpha1.Instance](ev.Record)
	if err != nil {
		return fmt.Errorf("instance %s: %w", ev.Record.Name, err)
	}
	i.setInstance(in)
	return nil
}

// setFleet, deleteFleet, setInstance and deleteInstance change the cache and tell the handlers.
// i.dispatch is held.
func (i *Informer) setFleet(f *v1alpha1.Fleet) {
	i.mu.Lock()
	was := i.fleets[f.Metadata.Name]
	i.fleets[f.Metadata.Name] = f
	i.mu.Unlock()
	i.tellFleet(was, f)
}

func (i *Informer) deleteFleet(name string) {
	i.mu.Lock()
	was, ok := i.fleets[name]
	delete(i.fleets, name)
	i.mu.Unlock()
	if ok {
		i.tellFleet(was, nil)
	}
}

func (i *Informer) setInstance(in *v1alpha1.Instance) {
	i.mu.Lock()
	was := i.instances[in.Metadata.Name]
	if was != nil && was.Spec.Fleet != in.Spec.Fleet {
		i.unindexLocked(was)
	}
	i.instances[in.Metadata.Name] = in
	m := i.byFleet[in.Spec.Fleet]
	if m == nil {
		m = map[string]*v1alpha1.Instance{}
		i.byFleet[in.Spec.Fleet] = m
	}
	m[in.Metadata.Name] = in
	i.mu.Unlock()
	i.tellInstance(was, in)
}

func (i *Informer) deleteInstance(name string) {
	i.mu.Lock()
	was, ok := i.instances[name]
	if ok {
		delete(i.instances, name)
		i.unindexLocked(was)
	}
	i.mu.Unlock()
	if ok {
		i.tellInstance(was, nil)
	}
}

// unindexLocked removes in from its fleet's index. i.mu is held.
func (i *Informer) unindexLocked(in *v1alpha1.Instance) {
	m := i.byFleet[in.Spec.Fleet]
	delete(m, in.Metadata.Name)
	if len(m) == 0 {
		delete(i.byFleet, in.Spec.Fleet)
	}
}

func (i *Informer) tellFleet(was, now *v1alpha1.Fleet) {
	for _, h := range i.handlers {
		if h.Fleet != nil {
			h.Fleet(was, now)
		}
	}
}

func (i *Informer) tellInstance(was, now *v1alpha1.Instance) {
	for _, h := range i.handlers {
		if h.Instance != nil {
			h.Instance(was, now)
		}
	}
}
