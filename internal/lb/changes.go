package lb

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// TargetChange tells a subscriber (OnTargetChange) that something it may act on happened to one
// target: its state changed, or it failed requests.
type TargetChange struct {
	Fleet, ID string
	// State is the target's state after the change.
	State State
	// Errors is true when the change is failed requests (5xx answers, timeouts, broken
	// connections) rather than a new state. It is sent at most once per errorNoticeEvery per
	// target, however many requests fail.
	Errors bool
}

// errorNoticeEvery bounds how often one target reports failed requests to subscribers.
const errorNoticeEvery = time.Second

// changeHub fans target changes out to subscribers. Sending costs one atomic load when nobody
// subscribed, so targets send unconditionally.
type changeHub struct {
	mu   sync.Mutex // serialises subscribe
	subs atomic.Pointer[[]func(TargetChange)]
}

func (h *changeHub) subscribe(f func(TargetChange)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var next []func(TargetChange)
	if cur := h.subs.Load(); cur != nil {
		next = slices.Clone(*cur)
	}
	next = append(next, f)
	h.subs.Store(&next)
}

func (h *changeHub) send(c TargetChange) {
	if h == nil {
		return
	}
	if subs := h.subs.Load(); subs != nil {
		for _, f := range *subs {
			f(c)
		}
	}
}

// OnTargetChange registers f, called whenever a target changes state (first verdict, healthy,
// unhealthy, ejected, back from ejection, draining, back in service) and, at most once a second
// per target, when a target fails requests. f is called on the load balancer's own goroutines,
// some holding the target's lock: it must return quickly and must not call the load balancer.
func (lb *LB) OnTargetChange(f func(TargetChange)) { lb.changes.subscribe(f) }

// noteErrors tells subscribers that t failed a request, at most once per errorNoticeEvery.
func (t *target) noteErrors() {
	if t.changes == nil {
		return
	}
	now := time.Now().UnixNano()
	last := t.errorNoticed.Load()
	if now-last < int64(errorNoticeEvery) || !t.errorNoticed.CompareAndSwap(last, now) {
		return
	}
	t.changes.send(TargetChange{Fleet: t.key.fleet, ID: t.key.id, State: t.state(), Errors: true})
}
