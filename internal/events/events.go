// Package events records Events: short notes about what happened to an object ("creating 3
// instances", "rolled back"), kept in the store for `herd events` and logged. Like client-go's
// event broadcaster, recording is split in two: Eventf only puts the event in a bounded buffer and
// never blocks its caller (a reconcile), and one writer, the runnable Start, writes the buffered
// events to the store in order, deduplicating repeats and keeping the newest MaxEvents. An event
// that finds the buffer full is dropped, counted (Dropped) and logged: losing a note is better than
// stalling the controller that writes it.
package events

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Defaults of Options.
const (
	DefaultMaxEvents = 1000
	DefaultBuffer    = 1000
	// DefaultDedupeWindow: the same event for the same object is recorded once within this
	// window, so that a failure retried with backoff does not flood the event list.
	DefaultDedupeWindow = 30 * time.Second
)

// flushTimeout bounds how long a stopping writer spends on the events still buffered.
const flushTimeout = 2 * time.Second

// Options configure a Recorder.
type Options struct {
	// Store receives the events. Required.
	Store store.Store
	// Logger logs every recorded event (warnings at Warn) and every drop. Default: discard.
	Logger *slog.Logger
	// Clock stamps the events. Default: the real clock.
	Clock clock.PassiveClock
	// MaxEvents bounds the events kept in the store; older ones are deleted as new ones arrive.
	// Default: DefaultMaxEvents.
	MaxEvents int
	// Buffer bounds the events waiting for the writer. Default: DefaultBuffer.
	Buffer int
	// DedupeWindow: an event equal to one recorded within this window (same object, reason and
	// message) is not recorded again. Default: DefaultDedupeWindow.
	DedupeWindow time.Duration
	// Recorded, when set, is called with the type and reason of every event recorded (before it
	// is buffered, so dropped and deduplicated ones count too: they describe what happened).
	Recorded func(typ, reason string)
}

// Recorder records events. Create it with New, run its writer with Start and call Eventf from
// any goroutine.
type Recorder struct {
	opts    Options
	log     *slog.Logger
	buf     chan *v1alpha1.Event
	dropped atomic.Int64

	// The writer's own state: only Start touches it.
	names    []string // stored event names, oldest first
	last     map[string]time.Time
	seq      int64
	reported int64 // drops already logged
}

// New returns a recorder writing to opts.Store once started.
func New(opts Options) *Recorder {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.MaxEvents <= 0 {
		opts.MaxEvents = DefaultMaxEvents
	}
	if opts.Buffer <= 0 {
		opts.Buffer = DefaultBuffer
	}
	if opts.DedupeWindow <= 0 {
		opts.DedupeWindow = DefaultDedupeWindow
	}
	return &Recorder{
		opts: opts, log: opts.Logger.With("component", "events"),
		buf: make(chan *v1alpha1.Event, opts.Buffer), last: map[string]time.Time{},
	}
}

// Eventf records an event about object ("Kind/name") of type typ (v1alpha1.EventNormal or
// EventWarning). It never blocks: the event is buffered for the writer, or dropped and counted when
// the buffer is full.
func (r *Recorder) Eventf(object, typ, reason, format string, args ...any) {
	ev := &v1alpha1.Event{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindEvent},
		Type:     typ, Reason: reason, Message: fmt.Sprintf(format, args...), Object: object,
		Time: r.opts.Clock.Now().UTC(),
	}
	if r.opts.Recorded != nil {
		r.opts.Recorded(typ, reason)
	}
	select {
	case r.buf <- ev:
	default:
		r.dropped.Add(1)
	}
}

// Dropped counts the events dropped because the buffer was full.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Start writes buffered events until ctx ends, then writes what is still buffered, within a short
// bound. It returns an error only when the stored events cannot be listed at start.
func (r *Recorder) Start(ctx context.Context) error {
	if err := r.load(ctx); err != nil {
		return err
	}
	for {
		select {
		case ev := <-r.buf:
			// A write under way when ctx ends is finished, within the same bound as the flush,
			// rather than cut short: a canceled write would lose an event already taken off the
			// buffer, such as the one a controller records as it is being stopped.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			r.write(wctx, ev)
			cancel()
		case <-ctx.Done():
			flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
			defer cancel()
			for {
				select {
				case ev := <-r.buf:
					r.write(flushCtx, ev)
				default:
					return nil
				}
			}
		}
	}
}

// load reads the names of the stored events so that trimming keeps working across restarts.
func (r *Recorder) load(ctx context.Context) error {
	recs, _, err := r.opts.Store.List(ctx, store.Events)
	if err != nil {
		return fmt.Errorf("events: list stored events: %w", err)
	}
	r.names = r.names[:0]
	for _, rec := range recs {
		r.names = append(r.names, rec.Name)
	}
	sort.Strings(r.names) // names start with a fixed-width timestamp
	return nil
}

// write stores one event, unless an equal one was stored within the dedupe window, and trims the
// oldest events beyond MaxEvents in the same transaction.
func (r *Recorder) write(ctx context.Context, ev *v1alpha1.Event) {
	if n := r.dropped.Load(); n > r.reported {
		r.log.Warn("events dropped: the buffer was full", "dropped", n-r.reported, "buffer", r.opts.Buffer)
		r.reported = n
	}
	now := ev.Time
	key := ev.Object + "\x00" + ev.Reason + "\x00" + ev.Message
	if t, ok := r.last[key]; ok && now.Sub(t) < r.opts.DedupeWindow {
		return
	}
	r.last[key] = now
	for k, t := range r.last {
		if now.Sub(t) >= r.opts.DedupeWindow {
			delete(r.last, k)
		}
	}
	level := slog.LevelInfo
	if ev.Type == v1alpha1.EventWarning {
		level = slog.LevelWarn
	}
	r.log.Log(ctx, level, ev.Message, "object", ev.Object, "reason", ev.Reason)
	r.seq++
	ev.Metadata.Name = fmt.Sprintf("%020d-%06d", now.UnixNano(), r.seq%1_000_000)
	op, err := store.PutOp(store.Events, ev)
	if err != nil {
		r.log.Error("encode event", "err", err, "reason", ev.Reason)
		return
	}
	ops := []store.Op{op}
	over := max(len(r.names)+1-r.opts.MaxEvents, 0)
	for _, old := range r.names[:over] {
		ops = append(ops, store.Op{Type: store.OpDelete, Kind: store.Events, Name: old})
	}
	if _, err := r.opts.Store.Txn(ctx, ops...); err != nil {
		r.log.Error("record event", "err", err, "reason", ev.Reason)
		return
	}
	r.names = append(r.names[over:], ev.Metadata.Name)
}
