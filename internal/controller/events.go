package controller

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// maxEvents bounds the events kept; older ones are deleted as new ones arrive.
const maxEvents = 1000

// dedupeWindow: the same event for the same object is recorded once within this window, so that a
// failure retried with backoff does not flood the event list.
const dedupeWindow = 30 * time.Second

// Recorder writes Events to the store and logs them.
type Recorder struct {
	store store.Store
	log   *slog.Logger

	mu    sync.Mutex
	names []string // stored event names, oldest first
	last  map[string]time.Time
	seq   int64
}

// NewRecorder returns a recorder writing to s.
func NewRecorder(s store.Store, log *slog.Logger) *Recorder {
	return &Recorder{store: s, log: log, last: map[string]time.Time{}}
}

// Load reads the names of the stored events so that trimming keeps working across restarts.
func (r *Recorder) Load(ctx context.Context) error {
	recs, _, err := r.store.List(ctx, store.Events)
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.names = r.names[:0]
	for _, rec := range recs {
		r.names = append(r.names, rec.Name)
	}
	sort.Strings(r.names) // names start with a fixed-width timestamp
	return nil
}

// Eventf records an event about object ("Kind/name").
func (r *Recorder) Eventf(ctx context.Context, object, typ, reason, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	now := time.Now().UTC()
	// One writer at a time keeps the trimming of old events simple and exact.
	r.mu.Lock()
	defer r.mu.Unlock()
	key := object + "\x00" + reason + "\x00" + msg
	if t, ok := r.last[key]; ok && now.Sub(t) < dedupeWindow {
		return
	}
	r.last[key] = now
	for k, t := range r.last {
		if now.Sub(t) >= dedupeWindow {
			delete(r.last, k)
		}
	}
	level := slog.LevelInfo
	if typ == v1alpha1.EventWarning {
		level = slog.LevelWarn
	}
	r.log.Log(ctx, level, msg, "object", object, "reason", reason)
	r.seq++
	name := fmt.Sprintf("%020d-%06d", now.UnixNano(), r.seq%1_000_000)
	ev := &v1alpha1.Event{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindEvent},
		Metadata: v1alpha1.ObjectMeta{Name: name},
		Type:     typ, Reason: reason, Message: msg, Object: object, Time: now,
	}
	op, err := store.PutOp(store.Events, ev)
	if err != nil {
		return
	}
	ops := []store.Op{op}
	over := max(len(r.names)+1-maxEvents, 0)
	for _, old := range r.names[:over] {
		ops = append(ops, store.Op{Type: store.OpDelete, Kind: store.Events, Name: old})
	}
	if _, err := r.store.Txn(ctx, ops...); err != nil {
		r.log.Error("record event", "err", err, "reason", reason)
		return
	}
	r.names = append(r.names[over:], name)
}
