// Package eventstest holds an event recorder for tests: it keeps every event at once, in memory,
// so that a test can also assert that an event was not recorded.
package eventstest

import (
	"fmt"
	"sync"
)

// Event is one recorded event.
type Event struct {
	Object, Type, Reason, Message string
}

// Recorder keeps the events it is given. The zero value is ready to use.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

// Eventf records an event, as events.Recorder.Eventf does.
func (r *Recorder) Eventf(object, typ, reason, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, Event{object, typ, reason, fmt.Sprintf(format, args...)})
}

// Events returns the events recorded so far, in order.
func (r *Recorder) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Event(nil), r.events...)
}

// Reasons returns the reasons of the events recorded so far, in order.
func (r *Recorder) Reasons() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, len(r.events))
	for i, ev := range r.events {
		out[i] = ev.Reason
	}
	return out
}

// Count returns how many events of reason were recorded.
func (r *Recorder) Count(reason string) int {
	n := 0
	for _, got := range r.Reasons() {
		if got == reason {
			n++
		}
	}
	return n
}
