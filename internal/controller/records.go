package controller

import (
	"maps"
	"reflect"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
)

// The phases that keep the records true to the providers: adopt what has no record, refresh
// what the providers report, and the helpers that retire records.

// adopt records provider instances that have no record: they were created by a controller that
// stopped before writing, or the store was restored from an older copy.
func (s *scope) adopt() {
	n := 0
	for name, o := range s.observed {
		if _, ok := s.records[name]; ok {
			continue
		}
		in := &v1alpha1.Instance{
			TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindInstance},
			Metadata: v1alpha1.ObjectMeta{Name: name, Labels: maps.Clone(o.Labels)},
			Spec: v1alpha1.InstanceSpec{
				Fleet: s.fleetName(), Revision: o.Labels[v1alpha1.LabelRevision], Region: o.Labels[v1alpha1.LabelRegion],
				Provider: s.observedBy[name], Image: o.Image,
			},
			Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhaseBooting},
		}
		created := o.CreatedAt
		in.Status.CreatedAt = &created
		s.records[name] = in
		s.mark(in)
		n++
	}
	if n > 0 {
		s.event(s.object, v1alpha1.EventNormal, "Adopted", "adopted %d running instances that had no record", n)
	}
}

// refresh copies what the providers report into the records.
func (s *scope) refresh() {
	lost := 0
	for name, in := range s.records {
		o, exists := s.observed[name]
		switch {
		case s.frozen(in):
			// Its region's provider did not list it: it is neither gone nor changed.
		case in.Status.Phase == v1alpha1.PhaseTerminating:
			// callProviders finishes the deletion.
		case !exists && in.Status.Phase == v1alpha1.PhasePending:
			// callProviders creates it.
		case !exists:
			// It was created and is gone: the record goes, and scale() replaces it.
			s.remove(in)
			lost++
		default:
			if s.apply(in, o) {
				s.mark(in)
			}
		}
	}
	if lost > 0 {
		s.event(s.object, v1alpha1.EventWarning, "InstancesLost", "%d instances vanished from their provider; replacing them", lost)
	}
}

// apply copies a provider's view into a record and reports whether anything changed.
func (s *scope) apply(in *v1alpha1.Instance, o provider.Instance) bool {
	before := in.Status
	st := &in.Status
	st.ProviderID = o.ProviderID
	st.Address = o.Address
	if st.CreatedAt == nil && !o.CreatedAt.IsZero() {
		t := o.CreatedAt
		st.CreatedAt = &t
	}
	switch o.State {
	case provider.StateReady:
		st.Phase = v1alpha1.PhaseReady
		st.LastError = ""
		if st.ReadyAt == nil {
			now := s.c.clock.Now().UTC()
			st.ReadyAt = &now
		}
	case provider.StateFailed:
		st.Phase = v1alpha1.PhaseFailed
		st.LastError = o.Reason
	case provider.StateDeleting:
		// Going on the provider's side (a spot instance EC2 is about to take): Terminating
		// holds no slot, so scale() launches its replacement now, outside healing's bound.
		st.Phase = v1alpha1.PhaseTerminating
		if st.TerminatingAt == nil {
			now := s.c.clock.Now().UTC()
			st.TerminatingAt = &now
		}
		if st.LastError == "" {
			st.LastError = o.Reason
		}
	default:
		st.Phase = v1alpha1.PhaseBooting
	}
	return !reflect.DeepEqual(before, *st)
}

func (s *scope) terminate(in *v1alpha1.Instance, why string) {
	if in.Status.Phase == v1alpha1.PhaseTerminating {
		return
	}
	now := s.c.clock.Now().UTC()
	in.Status.Phase = v1alpha1.PhaseTerminating
	in.Status.TerminatingAt = &now
	if why != "" && in.Status.LastError == "" {
		in.Status.LastError = why
	}
	s.mark(in)
}

func (s *scope) remove(in *v1alpha1.Instance) {
	if s.removed == nil {
		s.removed = map[string]*v1alpha1.Instance{}
	}
	s.removed[in.Metadata.Name] = in
	delete(s.records, in.Metadata.Name)
	delete(s.dirty, in.Metadata.Name)
}

func active(in *v1alpha1.Instance) bool {
	return in.Status.Phase != v1alpha1.PhaseTerminating && in.Status.Phase != v1alpha1.PhaseFailed
}

// holdsSlot reports whether an instance counts towards its revision's number of instances. A
// failed instance does until healing deletes it: its replacement is created then, within
// healing's bound and backoff, not as soon as it fails.
func holdsSlot(in *v1alpha1.Instance) bool { return in.Status.Phase != v1alpha1.PhaseTerminating }

func ready(in *v1alpha1.Instance) bool { return in.Status.Phase == v1alpha1.PhaseReady }
