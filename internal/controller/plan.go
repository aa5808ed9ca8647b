package controller

import (
	"sort"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// plan is what one reconcile decided from what it observed, before any of it is carried out. It
// is computed without I/O and without goroutines (the load balancer's health and statistics are
// read from memory), so that tests can check decisions on their own.
type plan struct {
	// Write are the records to store, new or changed, by name; Remove are the records to delete.
	Write, Remove []*v1alpha1.Instance
	// Create are the Pending records whose instances the providers must create; Delete are the
	// Terminating records whose instances they must delete, each once the load balancer has
	// drained it.
	Create, Delete []*v1alpha1.Instance
	// Targets are the fleet's instances for the load balancer (those not Terminating are routed),
	// by name; Weights each revision's percent of the traffic, nil for in proportion to instances.
	Targets []*v1alpha1.Instance
	Weights map[string]int32
	// Status is the fleet's status once the plan is carried out as planned. The executor
	// computes it again after the provider calls, whose outcome (an instance booting, a failure)
	// it cannot know in advance. Not set for a deleted fleet.
	Status v1alpha1.FleetStatus
	// RecordEvents are recorded once Write and Remove are stored; StatusEvents once the status is.
	RecordEvents, StatusEvents []event
	// Requeue, when > 0, is when a rollout step is due. (Healing's own recheck depends on the
	// records left after the provider calls: the executor adds it.)
	Requeue time.Duration
}

// plan runs the phases over the observed scope, in order, and returns what they decided. Each
// phase reads and changes s; nothing is written until the plan is executed.
func (s *scope) plan() *plan {
	if s.regions == nil {
		s.initRegions() // a scope made without observing (tests): every region answered
	}
	s.adopt()
	s.refresh()
	s.heal()
	s.loadRollout()
	if s.multiRegion() {
		s.wave()
	} else if r := s.regions[s.fleet.Spec.Regions[0].Name]; !r.frozen() {
		if rp := s.in(r); s.fleet.Spec.Tenancy != nil {
			rp.planTenants()
		} else if !rp.rollout() {
			rp.scale(s.revision)
		}
	}
	s.retireRegions()
	s.noteReplacements()
	return s.planned()
}

// planDeleted plans the removal of every instance of a fleet that no longer exists.
func (s *scope) planDeleted() *plan {
	s.adopt()
	n := 0
	for _, in := range s.records {
		if in.Status.Phase != v1alpha1.PhaseTerminating {
			s.terminate(in, "fleet deleted")
			n++
		}
	}
	if n > 0 {
		s.event(s.object, v1alpha1.EventNormal, "Deleting", "fleet deleted: deleting %d instances", n)
	}
	return s.planned()
}

// planned gathers the phases' decisions from s into a plan.
func (s *scope) planned() *plan {
	p := &plan{Targets: s.sorted(), RecordEvents: s.recordEvents, StatusEvents: s.statusEvents}
	s.recordEvents, s.statusEvents = nil, nil
	for _, in := range p.Targets {
		if s.dirty[in.Metadata.Name] {
			p.Write = append(p.Write, in)
		}
		_, exists := s.observed[in.Metadata.Name]
		switch {
		case s.frozen(in):
			// Its provider did not answer: nothing is asked of it until it does.
		case in.Status.Phase == v1alpha1.PhaseTerminating:
			p.Delete = append(p.Delete, in)
		case in.Status.Phase == v1alpha1.PhasePending && !exists:
			p.Create = append(p.Create, in)
		}
	}
	for _, name := range sortedKeys(s.removed) {
		p.Remove = append(p.Remove, s.removed[name])
	}
	if s.deleted {
		return p
	}
	p.Weights = s.weights()
	p.Status = s.fleetStatus(s.c.clock.Now().UTC())
	p.Requeue = s.requeue
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
