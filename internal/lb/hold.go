package lb

import (
	"context"
	"sync"
	"time"
)

// waker wakes every request held for a target when something that may give it one happens: a target
// became usable, or a config was applied.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next signal. Take it before checking the condition, so that a
// signal between the check and the wait is not missed.
func (w *waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *waker) signal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// hold waits, on a listener that holds requests (Listener.Hold), until some target can take a request
// with key k. It returns the listener state to serve with and the target, or a nil target when the
// listener does not hold, its queue is full, the wait timed out, ctx ended or the listener went away:
// the caller then answers 503 as without holding.
func (l *listener) hold(ctx context.Context, st *listenerState, k *pickKey) (*listenerState, *target) {
	h := st.cfg.Hold
	if h == nil || h.MaxQueued <= 0 {
		return st, nil
	}
	if l.stats.held.Add(1) > int64(h.MaxQueued) {
		l.stats.held.Add(-1)
		return st, nil
	}
	defer l.stats.held.Add(-1)
	timer := time.NewTimer(h.Timeout.D())
	defer timer.Stop()
	for {
		woken := l.lb.wake.wait()
		if l.sock.closed.Load() {
			return st, nil
		}
		// A changed config may have replaced this listener on the socket: route with the current one.
		cur := l.sock.handler.Load()
		if cur == nil {
			return st, nil
		}
		if cst := cur.state.Load(); cst != nil {
			st = cst
		}
		if t := st.routes.pick(k, nil); t != nil {
			return st, t
		}
		select {
		case <-woken:
		case <-timer.C:
			return st, nil
		case <-ctx.Done():
			return st, nil
		}
	}
}

// Held returns how many requests of a fleet wait for a healthy target right now.
func (lb *LB) Held(fleet string) int {
	lb.mu.Lock()
	listeners := lb.allListeners()
	lb.mu.Unlock()
	n := 0
	for _, l := range listeners {
		if l.state.Load().cfg.Fleet == fleet {
			n += int(l.stats.held.Load())
		}
	}
	return n
}
