package edgeplane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/edge"
	"herd.dev/herd/internal/localca"
	"herd.dev/herd/internal/store"
)

// Store kinds.
const (
	// Kind is the store kind Distributions are kept under.
	Kind = "distributions"
	// InvalidationKind is the store kind of invalidations, one record each.
	InvalidationKind = "edgeinvalidations"
)

// SetOptions configure a Set.
type SetOptions struct {
	Store store.Store
	// LBAddress is where the load balancer serves fleets' listeners, for origins that name a fleet.
	LBAddress string
	LocalCA   *localca.CA
	// DataDir holds the disk tiers of the locations (LocationOptions.DataDir).
	DataDir string
	Logger  *slog.Logger
	// Retry is how long to wait before listing again after the store failed. Default: 1s.
	Retry time.Duration
}

// Set runs one Location per Distribution in the store.
type Set struct {
	opts SetOptions
	log  *slog.Logger

	mu     sync.Mutex
	locs   map[string]*Location
	dists  map[string]*v1alpha1.Distribution
	errs   map[string]string              // by distribution: why its latest version is not served
	fleets map[string][]v1alpha1.Listener // the listeners of every fleet, for fleet origins
	// seen is the store revision the Set has handled every change up to; waiters are woken when
	// it moves.
	seen    int64
	moved   chan struct{}
	dropped map[string]int // by invalidation: URIs it dropped here
}

// NewSet returns a Set; Run runs it.
func NewSet(o SetOptions) *Set {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Retry <= 0 {
		o.Retry = time.Second
	}
	return &Set{opts: o, log: o.Logger.With("component", "edge"), locs: map[string]*Location{}, dists: map[string]*v1alpha1.Distribution{},
		errs: map[string]string{}, fleets: map[string][]v1alpha1.Listener{}, moved: make(chan struct{}), dropped: map[string]int{}}
}

// Run lists and watches the store until ctx ends, then stops every location.
func (s *Set) Run(ctx context.Context) error {
	defer s.closeAll()
	for ctx.Err() == nil {
		if err := s.listAndWatch(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("edge locations: listing the store again", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(s.opts.Retry):
			}
		}
	}
	return nil
}

// listAndWatch makes the locations what the store holds, then follows its changes until the watch
// ends.
func (s *Set) listAndWatch(ctx context.Context) error {
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, s.opts.Store, store.Fleets)
	if err != nil {
		return err
	}
	dists, rev, err := store.ListObjects[v1alpha1.Distribution](ctx, s.opts.Store, Kind)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.fleets = map[string][]v1alpha1.Listener{}
	for _, f := range fleets {
		s.fleets[f.Metadata.Name] = f.Spec.Listeners
	}
	want := map[string]bool{}
	for _, d := range dists {
		want[d.Metadata.Name] = true
		s.applyLocked(d)
	}
	for name := range s.locs {
		if !want[name] {
			s.removeLocked(name)
		}
	}
	s.mu.Unlock()
	s.advance(rev)
	ch, err := s.opts.Store.Watch(ctx, "", rev)
	if err != nil {
		return err
	}
	for ev := range ch {
		s.handle(ev)
		s.advance(ev.Record.ResourceVersion)
	}
	return errors.New("the store's watch ended")
}

// handle applies one change of the store.
func (s *Set) handle(ev store.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch ev.Record.Kind {
	case Kind:
		if ev.Type == store.Deleted {
			s.removeLocked(ev.Record.Name)
			return
		}
		d, err := store.DecodeRecord[v1alpha1.Distribution](ev.Record)
		if err != nil {
			s.log.Error("edge locations: unreadable distribution", "err", err)
			return
		}
		s.applyLocked(d)
	case store.Fleets:
		var listeners []v1alpha1.Listener
		if ev.Type != store.Deleted {
			f, err := store.DecodeRecord[v1alpha1.Fleet](ev.Record)
			if err != nil {
				return
			}
			listeners = f.Spec.Listeners
		}
		if old, ok := s.fleets[ev.Record.Name]; ok == (ev.Type != store.Deleted) && reflect.DeepEqual(old, listeners) {
			return // a status write: where the fleet is served has not changed
		}
		if ev.Type == store.Deleted {
			delete(s.fleets, ev.Record.Name)
		} else {
			s.fleets[ev.Record.Name] = listeners
		}
		for _, d := range s.dists {
			if namesFleet(d, ev.Record.Name) {
				s.applyLocked(d)
			}
		}
	case InvalidationKind:
		if ev.Type != store.Added {
			return
		}
		var inv Invalidation
		if err := json.Unmarshal(ev.Record.Value, &inv); err != nil {
			return
		}
		if l := s.locs[inv.Distribution]; l != nil {
			n := l.Edge().Invalidate(inv.Paths)
			s.dropped[ev.Record.Name] = n
			s.log.Info("invalidated", "distribution", inv.Distribution, "paths", inv.Paths, "dropped", n)
		}
	}
}

func namesFleet(d *v1alpha1.Distribution, fleet string) bool {
	for _, o := range d.Spec.Origins {
		if o.Fleet == fleet {
			return true
		}
	}
	return false
}

// applyLocked starts or reconfigures d's location. A version that cannot be served (a fleet origin
// not there yet) leaves the location serving the last one, and says why in its status.
func (s *Set) applyLocked(d *v1alpha1.Distribution) {
	name := d.Metadata.Name
	s.dists[name] = d
	var err error
	if l := s.locs[name]; l != nil {
		err = l.Apply(d)
	} else {
		var l *Location
		l, err = NewLocation(d, LocationOptions{Origins: s.resolver(), LocalCA: s.opts.LocalCA, DataDir: s.opts.DataDir, Logger: s.opts.Logger})
		if l != nil {
			s.locs[name] = l
		}
	}
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg != s.errs[name] && msg != "" {
		s.log.Error("edge location cannot serve its distribution as written", "distribution", name, "err", err)
	}
	s.errs[name] = msg
}

func (s *Set) removeLocked(name string) {
	if l := s.locs[name]; l != nil {
		l.Close()
	}
	delete(s.locs, name)
	delete(s.dists, name)
	delete(s.errs, name)
}

// resolver resolves fleet origins from the fleets the Set follows; callers hold s.mu.
func (s *Set) resolver() OriginResolver {
	return func(eo v1alpha1.EdgeOrigin) (*url.URL, error) {
		if eo.Fleet == "" {
			return url.Parse(eo.URL)
		}
		listeners, ok := s.fleets[eo.Fleet]
		if !ok {
			return nil, fmt.Errorf("fleet %s does not exist (yet)", eo.Fleet)
		}
		return FleetOrigin(eo.Fleet, listeners, eo, s.opts.LBAddress)
	}
}

func (s *Set) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name := range s.locs {
		s.removeLocked(name)
	}
}

// advance records that every change up to rev is handled.
func (s *Set) advance(rev int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if rev > s.seen {
		s.seen = rev
		close(s.moved)
		s.moved = make(chan struct{})
	}
}

// waitFor blocks until the Set has handled every change up to rev.
func (s *Set) waitFor(ctx context.Context, rev int64) error {
	for {
		s.mu.Lock()
		seen, moved := s.seen, s.moved
		s.mu.Unlock()
		if seen >= rev {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the edge location has not seen the change yet: %w", ctx.Err())
		case <-moved:
		}
	}
}

// Status is where the location of a Distribution serves, and why it does not serve it as written.
func (s *Set) Status(name string) v1alpha1.DistributionStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	var st v1alpha1.DistributionStatus
	if l := s.locs[name]; l != nil {
		st = l.Status()
	}
	st.Error = s.errs[name]
	return st
}

// Stats are the figures of a Distribution's location, and whether it runs here.
func (s *Set) Stats(name string) (edge.Stats, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.locs[name]
	if l == nil {
		return edge.Stats{}, false
	}
	return l.Edge().Stats(), true
}

// Describe implements prometheus.Collector; it describes nothing, as the locations come and go
// (an unchecked collector).
func (s *Set) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector: every location's counters, labelled by distribution.
func (s *Set) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	locs := make([]*Location, 0, len(s.locs))
	for _, l := range s.locs {
		locs = append(locs, l)
	}
	s.mu.Unlock()
	for _, l := range locs {
		l.Edge().Metrics().Collect(ch)
	}
}
