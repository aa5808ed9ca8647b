// Package chaos injects faults on purpose, as a fault injection service does: a region cut off
// or degraded (through its provider's regionnet.Chaos), an instance killed (provider.InstanceKiller), a
// fleet's health checks paused (on every load balancer this control plane configures). Each
// action is a record of its own kind in the store, written before it is done, so that it is
// undone when its duration ends, when it is stopped, and when herd up starts again: nothing it
// does outlives its duration or the control plane that did it.
package chaos

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
)

// Kind is the store kind chaos actions are kept under.
const Kind = "chaos"

// Bounds and defaults.
const (
	DefaultDuration = 5 * time.Minute
	MinDuration     = time.Second
	MaxDuration     = 24 * time.Hour
	MaxLatency      = time.Minute
	// KeepEnded is how many ended actions are kept for `herd chaos list`; older ones go.
	KeepEnded = 100
)

// HealthPauser is a load balancer configurer whose fleets' health checks can be paused
// (lbsync's Sync and Regional).
type HealthPauser interface {
	SetHealthPaused(fleets map[string]bool)
}

// EventRecorder records an event about an object, as events.Recorder does.
type EventRecorder interface {
	Eventf(object, typ, reason, format string, args ...any)
}

// Options configure an Engine.
type Options struct {
	Store store.Store
	// Providers are the control plane's providers by name.
	Providers map[string]provider.Provider
	// Networks are the networks of the providers whose regions are networks, by provider name:
	// those can partition or degrade a region.
	Networks map[string]regionnet.Chaos
	// Pausers are told which fleets' health checks are paused.
	Pausers []HealthPauser
	Events  EventRecorder
	Logger  *slog.Logger
	// Since is when this control plane started: an action still active that started before it
	// is undone by Run, as the provider undoes its region actions when it starts. Default: New's
	// time.
	Since time.Time
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Engine starts, stops and expires chaos actions.
type Engine struct {
	opts Options
	log  *slog.Logger
	mu   sync.Mutex // one start or stop at a time, so that two actions never race on a target
	wake chan struct{}
}

// New returns an Engine. Run it where the controller runs.
func New(opts Options) (*Engine, error) {
	if opts.Store == nil {
		return nil, errors.New("chaos: a store is required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Since.IsZero() {
		opts.Since = opts.Now()
	}
	// Actions are dated to the millisecond: one started in Since's millisecond is this one's.
	opts.Since = opts.Since.Truncate(time.Millisecond)
	if opts.Events == nil {
		opts.Events = noEvents{}
	}
	return &Engine{opts: opts, log: opts.Logger.With("component", "chaos"), wake: make(chan struct{}, 1)}, nil
}

type noEvents struct{}

func (noEvents) Eventf(object, typ, reason, format string, args ...any) {}

// RequestError is a request refused before anything was done; the message names the field and
// the fix.
type RequestError struct{ msg string }

func (e *RequestError) Error() string { return e.msg }

func refuse(format string, args ...any) error { return &RequestError{fmt.Sprintf(format, args...)} }

// ErrNotFound is returned for an action that does not exist.
var ErrNotFound = errors.New("chaos action not found")

// Start checks spec, records the action and does it. A spec that cannot be done is refused
// with a *RequestError and changes nothing.
func (e *Engine) Start(ctx context.Context, spec v1alpha1.ChaosActionSpec) (*v1alpha1.ChaosAction, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.check(ctx, &spec); err != nil {
		return nil, err
	}
	now := e.opts.Now().UTC().Truncate(time.Millisecond)
	a := &v1alpha1.ChaosAction{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: "herd.dev/v1alpha1", Kind: "ChaosAction"},
		Metadata: v1alpha1.ObjectMeta{Name: actionName(spec), CreationTimestamp: &now},
		Spec:     spec,
		Status:   v1alpha1.ChaosActionStatus{Phase: v1alpha1.ChaosActive, StartedAt: now},
	}
	if spec.Action != v1alpha1.ChaosKillInstance {
		ends := now.Add(spec.Duration.Duration)
		a.Status.EndsAt = &ends
	}
	// Recorded first: a crash after the fault leaves a record that the next start undoes.
	if err := put(ctx, e.opts.Store, a); err != nil {
		return nil, err
	}
	if err := e.do(ctx, a); err != nil {
		e.undo(ctx, a) // what was half done
		e.finish(ctx, a, v1alpha1.ChaosFailed, err.Error())
		return a, fmt.Errorf("%s %s: %w", spec.Action, spec.Target, err)
	}
	if spec.Action == v1alpha1.ChaosKillInstance {
		e.finish(ctx, a, v1alpha1.ChaosEnded, "every process of the instance was killed; the controller replaces it")
	} else {
		e.event(a, v1alpha1.EventWarning, "ChaosStarted", "chaos %s: %s %s for %s", a.Metadata.Name, spec.Action, spec.Target, spec.Duration.Duration)
	}
	e.poke()
	return a, nil
}

// Stop undoes an active action now.
func (e *Engine) Stop(ctx context.Context, name string) (*v1alpha1.ChaosAction, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	a, err := store.GetObject[v1alpha1.ChaosAction](ctx, e.opts.Store, Kind, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("chaos action %q: %w (herd chaos list shows them)", name, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if a.Status.Phase == v1alpha1.ChaosActive {
		e.end(ctx, a, "stopped")
		e.poke()
	}
	return a, nil
}

// List returns every action kept, newest first.
func (e *Engine) List(ctx context.Context) ([]*v1alpha1.ChaosAction, error) {
	list, _, err := store.ListObjects[v1alpha1.ChaosAction](ctx, e.opts.Store, Kind)
	if err != nil {
		return nil, err
	}
	sort.Slice(list, func(i, j int) bool {
		if !list[i].Status.StartedAt.Equal(list[j].Status.StartedAt) {
			return list[i].Status.StartedAt.After(list[j].Status.StartedAt)
		}
		return list[i].Metadata.Name < list[j].Metadata.Name
	})
	return list, nil
}

// Get returns one action.
func (e *Engine) Get(ctx context.Context, name string) (*v1alpha1.ChaosAction, error) {
	a, err := store.GetObject[v1alpha1.ChaosAction](ctx, e.opts.Store, Kind, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("chaos action %q: %w (herd chaos list shows them)", name, ErrNotFound)
	}
	return a, err
}

// Run undoes the actions left active from before this control plane started, then ends every
// action when its duration does and keeps the load balancers' paused fleets as the active
// pause-health actions say, until ctx ends. Run it in the replica that runs the controller.
func (e *Engine) Run(ctx context.Context) error {
	const retry = time.Second
	for ctx.Err() == nil {
		next, err := e.reconcile(ctx)
		if err != nil {
			e.log.Warn("chaos actions: trying again", "err", err, "retry_in", retry.String())
			next = retry
		}
		timer := time.NewTimer(next)
		select {
		case <-ctx.Done():
		case <-timer.C:
		case <-e.wake:
		}
		timer.Stop()
	}
	return nil
}

// poke makes Run look at the actions now.
func (e *Engine) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// reconcile ends what must end, tells the pausers the paused fleets, prunes old records, and
// returns when to look again.
func (e *Engine) reconcile(ctx context.Context) (time.Duration, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	list, err := e.List(ctx)
	if err != nil {
		return 0, err
	}
	now := e.opts.Now()
	next := time.Minute // a stop or a start pokes Run; this is only a safety net
	ended := 0
	for _, a := range list {
		if a.Status.Phase != v1alpha1.ChaosActive {
			if ended++; ended > KeepEnded {
				if err := store.Delete(ctx, e.opts.Store, Kind, a.Metadata.Name, a.Metadata.ResourceVersion); err != nil && !errors.Is(err, store.ErrNotFound) {
					e.log.Warn("prune an old chaos action", "action", a.Metadata.Name, "err", err)
				}
			}
			continue
		}
		switch {
		case a.Status.StartedAt.Before(e.opts.Since):
			e.end(ctx, a, "undone: herd up started again, and nothing chaos does outlives the control plane that did it")
			continue
		case a.Status.EndsAt != nil && !now.Before(*a.Status.EndsAt):
			e.end(ctx, a, "its duration ended")
			continue
		case a.Status.EndsAt != nil:
			next = min(next, a.Status.EndsAt.Sub(now))
		}
	}
	paused := PausedFleets(list) // end marked the actions it ended
	for _, p := range e.opts.Pausers {
		p.SetHealthPaused(paused)
	}
	return max(next, 10*time.Millisecond), nil
}

// PausedFleets returns the fleets whose health checks actions pause: the targets of the active
// pause-health actions. The leader's Run tells its load balancers; a replica that does not lead
// reads the same records (lbsync's Follow), so that its load balancer agrees.
func PausedFleets(actions []*v1alpha1.ChaosAction) map[string]bool {
	paused := map[string]bool{}
	for _, a := range actions {
		if a.Status.Phase == v1alpha1.ChaosActive && a.Spec.Action == v1alpha1.ChaosPauseHealth {
			paused[a.Spec.Target] = true
		}
	}
	return paused
}

// end undoes an active action and records it ended (or failed, when the undo failed: the next
// start of the provider undoes region actions in any case).
func (e *Engine) end(ctx context.Context, a *v1alpha1.ChaosAction, why string) {
	if err := e.undo(ctx, a); err != nil {
		e.finish(ctx, a, v1alpha1.ChaosFailed, fmt.Sprintf("%s, but undoing it failed: %v; restarting herd up undoes it", why, err))
		return
	}
	e.finish(ctx, a, v1alpha1.ChaosEnded, why)
}

// finish records the action's end and its event.
func (e *Engine) finish(ctx context.Context, a *v1alpha1.ChaosAction, phase, msg string) {
	now := e.opts.Now().UTC().Truncate(time.Millisecond)
	a.Status.Phase, a.Status.EndedAt, a.Status.Message = phase, &now, msg
	if err := put(ctx, e.opts.Store, a); err != nil {
		e.log.Error("record the end of a chaos action", "action", a.Metadata.Name, "err", err)
	}
	typ, reason := v1alpha1.EventNormal, "ChaosEnded"
	if phase == v1alpha1.ChaosFailed {
		typ, reason = v1alpha1.EventWarning, "ChaosFailed"
	}
	if a.Spec.Action == v1alpha1.ChaosKillInstance && phase == v1alpha1.ChaosEnded {
		typ, reason = v1alpha1.EventWarning, "ChaosKilled"
	}
	e.event(a, typ, reason, "chaos %s: %s %s: %s", a.Metadata.Name, a.Spec.Action, a.Spec.Target, msg)
}

func (e *Engine) event(a *v1alpha1.ChaosAction, typ, reason, format string, args ...any) {
	e.opts.Events.Eventf(targetObject(a.Spec), typ, reason, format, args...)
}

// targetObject is the object an action's events are about.
func targetObject(s v1alpha1.ChaosActionSpec) string {
	switch s.Action {
	case v1alpha1.ChaosKillInstance:
		return "Instance/" + s.Target
	case v1alpha1.ChaosPauseHealth:
		return "Fleet/" + s.Target
	}
	return "Region/" + s.Target
}

// put writes a, creating it or updating the version read, and sets its new version.
func put(ctx context.Context, st store.Store, a *v1alpha1.ChaosAction) error {
	if err := store.PutObject(ctx, st, Kind, a); err != nil {
		return fmt.Errorf("store chaos action %s: %w", a.Metadata.Name, err)
	}
	return nil
}

// actionName is a new action's name: the action, the target (cut to fit a DNS label) and a
// random suffix.
func actionName(s v1alpha1.ChaosActionSpec) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	target := s.Target
	if max := 63 - len(s.Action) - 8; len(target) > max {
		target = strings.TrimRight(target[:max], "-")
	}
	return s.Action + "-" + target + "-" + hex.EncodeToString(b)
}
