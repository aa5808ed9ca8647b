package controller

import "fmt"

// EventRecorder records events about objects ("Kind/name"): internal/events implements it. Eventf
// must not block, as it is called while reconciling.
type EventRecorder interface {
	Eventf(object, typ, reason, format string, args ...any)
}

// event is one event a reconcile will record once what it describes is stored.
type event struct {
	object, typ, reason, message string
}

// event notes an event about instance records (created, deleted, adopted): it is recorded after
// the records are stored, and never if their write fails.
func (s *scope) event(object, typ, reason, format string, args ...any) {
	s.recordEvents = append(s.recordEvents, event{object, typ, reason, fmt.Sprintf(format, args...)})
}

// statusEvent notes an event about what the fleet's status holds (a rollout's step, a pause in
// healing): it is recorded once the status is stored.
func (s *scope) statusEvent(object, typ, reason, format string, args ...any) {
	s.statusEvents = append(s.statusEvents, event{object, typ, reason, fmt.Sprintf(format, args...)})
}

// emit records evs and empties the list.
func (s *scope) emit(evs *[]event) {
	s.emitAll(*evs)
	*evs = nil
}

// emitAll records evs.
func (s *scope) emitAll(evs []event) {
	for _, ev := range evs {
		s.c.events.Eventf(ev.object, ev.typ, ev.reason, "%s", ev.message)
	}
}
