package controller

import (
	"fmt"
	"maps"
	"reflect"
	"sort"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
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
		s.enter(r)
		if !s.rollout() {
			s.scale(s.revision)
		}
		s.leave()
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
		st.Phase = v1alpha1.PhaseTerminating
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

// scale creates and deletes instances of the region planning works on so that revision target
// has the desired count, moving from older revisions as a rolling update bounded by maxSurge and
// maxUnavailable.
func (s *scope) scale(target string) {
	spec := s.fleet.Spec
	desired := s.desired()
	maxSurge := int(*spec.Rollout.MaxSurge)
	maxUnavailable := int(*spec.Rollout.MaxUnavailable)

	var cur, old []*v1alpha1.Instance
	for _, in := range s.scoped() {
		if !holdsSlot(in) {
			continue
		}
		if in.Spec.Revision == target {
			cur = append(cur, in)
		} else {
			old = append(old, in)
		}
	}
	// The warm pool stands apart: a shortfall is first made up from it, and it is refilled after.
	cur, warm := splitWarm(cur)
	if need := desired - len(cur); need > 0 && len(warm) > 0 {
		var promoted []*v1alpha1.Instance
		promoted, warm = s.promoteWarm(warm, need)
		cur = append(cur, promoted...)
	}

	toCreate := desired - len(cur)
	if len(old) > 0 {
		toCreate = min(toCreate, desired+maxSurge-len(cur)-len(old))
	}
	toCreate = min(toCreate, s.c.opts.MaxConcurrentCreates)
	if toCreate > 0 {
		image := s.imageOf(target)
		if image == "" {
			s.errs = append(s.errs, fmt.Errorf("revision %s: image unknown, cannot create its instances", target))
			return
		}
		region := s.placement()
		for range toCreate {
			s.newRecordOf(region, target, image)
		}
		s.event(s.object, v1alpha1.EventNormal, "ScalingUp", "creating %d instances of revision %s%s (desired %d)", toCreate, target, s.where(), desired)
	}

	if extra := len(cur) - desired; extra > 0 {
		sortForRemoval(cur)
		for _, in := range cur[:extra] {
			s.terminate(in, "")
		}
		s.event(s.object, v1alpha1.EventNormal, "ScalingDown", "deleting %d instances%s (desired %d)", extra, s.where(), desired)
	}
	if len(old) == 0 {
		// Not during a rolling update: warm instances are of the current revision only.
		s.refillWarm(warm, target, s.c.opts.MaxConcurrentCreates-max(toCreate, 0))
	} else if len(warm) > 0 {
		for _, in := range warm {
			s.terminate(in, "")
		}
	}

	if len(old) > 0 {
		// Old instances that are not ready serve nothing and can go at once; ready ones go only
		// while enough ready instances remain.
		readyCount := 0
		for _, in := range append(append([]*v1alpha1.Instance{}, cur...), old...) {
			if ready(in) && in.Status.Phase != v1alpha1.PhaseTerminating {
				readyCount++
			}
		}
		budget := readyCount - (desired - maxUnavailable)
		sortForRemoval(old)
		removed := 0
		for _, in := range old {
			if ready(in) {
				if budget <= 0 {
					continue
				}
				budget--
			}
			s.terminate(in, "")
			removed++
		}
		if removed > 0 {
			s.event(s.object, v1alpha1.EventNormal, "RollingUpdate", "deleting %d instances of older revisions for %s%s", removed, target, s.where())
		}
	}
}

// sortForRemoval orders instances the way they are best removed: those not ready first, then the
// newest.
func sortForRemoval(list []*v1alpha1.Instance) {
	sort.Slice(list, func(i, j int) bool {
		if ready(list[i]) != ready(list[j]) {
			return !ready(list[i])
		}
		return created(list[i]).After(created(list[j]))
	})
}

func created(in *v1alpha1.Instance) time.Time {
	if in.Status.CreatedAt != nil {
		return *in.Status.CreatedAt
	}
	return time.Time{}
}

// newRecordOf records a new instance of revision rev booting image.
func (s *scope) newRecordOf(region v1alpha1.Region, rev, image string) *v1alpha1.Instance {
	name := newInstanceName(s.fleetName(), s.records)
	labels := map[string]string{
		v1alpha1.LabelFleet:    s.fleetName(),
		v1alpha1.LabelRevision: rev,
		v1alpha1.LabelRegion:   region.Name,
	}
	in := &v1alpha1.Instance{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindInstance},
		Metadata: v1alpha1.ObjectMeta{Name: name, Labels: labels},
		Spec: v1alpha1.InstanceSpec{
			Fleet: s.fleetName(), Revision: rev, Region: region.Name, Provider: region.Provider, Image: image,
		},
		Status: v1alpha1.InstanceStatus{Phase: v1alpha1.PhasePending},
	}
	s.records[name] = in
	s.mark(in)
	return in
}
