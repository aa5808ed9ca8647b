package controller

import (
	"errors"
	"fmt"
	"reflect"
	"sort"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/fleetcond"
	"herd.dev/herd/internal/store"
)

// fleetStatus computes the fleet's status from the reconcile's records, rollout and healing
// state, as of now. It is the one place the status is computed. Its ready counts are of
// instances that serve (serves): Ready by the agent's verdict and healthy in the load balancer
// that sends them traffic; the phase and the conditions follow from them.
func (s *scope) fleetStatus(now time.Time) v1alpha1.FleetStatus {
	f := s.fleet
	st := v1alpha1.FleetStatus{ObservedGeneration: f.Metadata.Generation, CurrentRevision: s.revision}
	revs := map[string]*v1alpha1.RevisionStatus{}
	var order []string
	lastErr := ""
	for _, in := range s.sorted() {
		if in.Status.LastError != "" && in.Status.Phase != v1alpha1.PhaseTerminating {
			lastErr = in.Status.LastError
		}
		if !active(in) || IsWarm(in) {
			continue // the warm pool is out of rotation: not part of the fleet's replicas
		}
		rs := revs[in.Spec.Revision]
		if rs == nil {
			rs = &v1alpha1.RevisionStatus{Name: in.Spec.Revision, Image: in.Spec.Image}
			revs[in.Spec.Revision] = rs
			order = append(order, in.Spec.Revision)
		}
		rs.Replicas++
		st.Replicas++
		if s.serves(in) {
			rs.ReadyReplicas++
			st.ReadyReplicas++
		}
	}
	if _, ok := revs[s.revision]; !ok {
		revs[s.revision] = &v1alpha1.RevisionStatus{Name: s.revision, Image: f.Spec.Image}
		order = append(order, s.revision)
	}
	sort.SliceStable(order, func(i, j int) bool { return order[i] == s.revision && order[j] != s.revision })
	totalReady := st.ReadyReplicas
	weights := s.weights()
	for _, name := range order {
		rs := revs[name]
		if weights != nil {
			rs.Weight = weights[name]
		} else if totalReady > 0 {
			rs.Weight = int32(100 * int64(rs.ReadyReplicas) / int64(totalReady))
		}
		st.Revisions = append(st.Revisions, *rs)
	}
	desired := s.totalDesired()
	cur := revs[s.revision]
	switch {
	case len(s.errs) > 0:
		st.Phase, st.Message = "Degraded", errors.Join(s.errs...).Error()
	case cur.ReadyReplicas == desired && st.Replicas == desired:
		st.Phase = "Ready"
	case st.Replicas == 0 && desired > 0:
		st.Phase, st.Message = "Pending", fmt.Sprintf("0/%d instances", desired)
	default:
		st.Phase, st.Message = "Scaling", fmt.Sprintf("%d/%d instances of %s ready", cur.ReadyReplicas, desired, s.revision)
	}
	if st.Phase != "Degraded" && lastErr != "" && st.Phase != "Ready" {
		st.Message += ": " + lastErr
	}
	if ro := s.ro; ro != nil && ro.Revision == s.revision {
		switch ro.Phase {
		case v1alpha1.RolloutRolledBack, v1alpha1.RolloutFailed:
			st.Phase, st.Message = "Degraded", fmt.Sprintf("rollout of %s %s: %s", ro.Revision, ro.Phase, ro.Message)
		case v1alpha1.RolloutProgressing, v1alpha1.RolloutPaused:
			if st.Phase == "Ready" || st.Phase == "Scaling" {
				st.Phase, st.Message = "Scaling", fmt.Sprintf("%s rollout to %s: %s", ro.Strategy, ro.Revision, ro.Message)
			}
		}
	}
	st.Rollout = s.ro
	st.Regions = s.regionStatuses()
	st.Healing = s.healState().status(now)
	st.History = s.history(now)
	st.Conditions = fleetcond.Update(s.stored.Status.Conditions, s.conditionInputs(&st, cur), now)
	return st
}

// conditionInputs gathers what the fleet's conditions are computed from: st is the status
// fleetStatus computed (its counts and healing) and cur the current revision's part of it, so
// that the conditions and the ready counts never disagree.
func (s *scope) conditionInputs(st *v1alpha1.FleetStatus, cur *v1alpha1.RevisionStatus) fleetcond.Observed {
	f := s.fleet
	o := fleetcond.Observed{
		Generation:   f.Metadata.Generation,
		Desired:      s.totalDesired(),
		Replicas:     st.Replicas,
		Updated:      cur.Replicas,
		UpdatedReady: cur.ReadyReplicas,
		Available:    st.ReadyReplicas,
		Revision:     s.revision,
		Rollout:      s.ro,
		Listeners:    len(f.Spec.Listeners),
		Healing:      st.Healing,
	}
	if f.Spec.Rollout.MaxUnavailable != nil {
		o.MaxUnavailable = *f.Spec.Rollout.MaxUnavailable
	}
	if s.c.opts.Targets != nil {
		o.ListenerError = s.c.opts.Targets.ListenerError(f.Metadata.Name)
	}
	if len(s.errs) > 0 {
		o.ReconcileError = errors.Join(s.errs...)
	}
	return o
}

// writeStatus stores st as the fleet's status, stamped now, unless the stored status already says
// the same. stored reports whether the fleet's status is st afterwards: false when the fleet
// changed meanwhile (the watch brings it back).
func (s *scope) writeStatus(st v1alpha1.FleetStatus, now time.Time) (stored bool, err error) {
	f := s.fleet
	prev := s.stored.Status
	prev.LastReconcile = nil
	if reflect.DeepEqual(prev, st) {
		return true, nil
	}
	st.LastReconcile = &now
	s.stored.Status = st
	op, err := store.PutOp(store.Fleets, s.stored)
	if err != nil {
		return false, err
	}
	recs, err := s.c.opts.Store.Txn(s.ctx, op)
	if err != nil {
		// A conflict means the user changed the fleet meanwhile: the watch requeues it, and the
		// status events are noted again by that reconcile if they still hold.
		if errors.Is(err, store.ErrConflict) {
			return false, nil
		}
		return false, fmt.Errorf("write status of fleet %s: %w", f.Metadata.Name, err)
	}
	s.c.statusWrites.Store(f.Metadata.Name, recs[0].ResourceVersion)
	return true, nil
}
