package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"sort"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
)

// providerCallParallelism bounds concurrent provider calls within one reconcile.
const providerCallParallelism = 16

// Reconcile moves one fleet towards its spec: adopt what the providers run, refresh statuses,
// heal (replace failed and unhealthy instances), create and delete instances to match the desired count and revision,
// then write the fleet's status once. It is safe to call again at any point; errors are retried by
// the caller with backoff.
func (c *Controller) Reconcile(ctx context.Context, name string) (Result, error) {
	rec, err := c.opts.Store.Get(ctx, store.Fleets, name)
	if errors.Is(err, store.ErrNotFound) {
		return c.reconcileDeleted(ctx, name)
	}
	if err != nil {
		return Result{}, fmt.Errorf("get fleet %s: %w", name, err)
	}
	// Two copies: the one reconciled (defaulted, image resolved) and the one the status is written
	// onto, which keeps the spec exactly as the user applied it.
	fleet, err := store.DecodeRecord[v1alpha1.Fleet](rec)
	if err != nil {
		return Result{}, err
	}
	stored, err := store.DecodeRecord[v1alpha1.Fleet](rec)
	if err != nil {
		return Result{}, err
	}
	// Stored fleets are defaulted on write; defaulting again fills fields added since.
	v1alpha1.SetFleetDefaults(fleet, "")
	if c.opts.ResolveImage != nil {
		digest, err := c.opts.ResolveImage(fleet.Spec.Image)
		if err != nil {
			return Result{}, fmt.Errorf("fleet %s: resolve image %q: %w", name, fleet.Spec.Image, err)
		}
		fleet.Spec.Image = digest // in memory only: instances and the revision pin the digest
	}
	s := &scope{c: c, ctx: ctx, fleet: fleet, stored: stored, object: "Fleet/" + name, revision: RevisionName(fleet)}
	s.records = c.fleetInstances(name)
	if err := s.observe(c.providersOf(fleet, s.records)); err != nil {
		return Result{}, err
	}
	// The phases, in order. Each reads and changes s; writes happen in commit.
	s.adopt()
	s.refresh()
	s.heal()
	if !s.rollout() {
		s.scale()
	}
	s.noteReplacements()
	if err := s.commit(); err != nil {
		return Result{}, err
	}
	// The load balancer learns of new and terminating instances before any is deleted, so that
	// deletions wait for their drain.
	if c.opts.Targets != nil {
		c.opts.Targets.SetFleetTargets(fleet, s.sorted(), s.weights())
	}
	s.callProviders()
	if err := s.commit(); err != nil {
		return Result{}, err
	}
	if c.opts.Targets != nil {
		c.opts.Targets.SetFleetTargets(fleet, s.sorted(), s.weights())
	}
	if err := s.writeStatus(); err != nil {
		return Result{}, err
	}
	// A settled fleet is looked at again by the periodic resync; a busy one sooner.
	res := Result{}
	if s.busy() {
		res.RequeueAfter = c.opts.PollInterval
	}
	res.RequeueAfter = sooner(sooner(res.RequeueAfter, s.requeue), s.healRequeue())
	return res, errors.Join(s.errs...)
}

// sooner returns the shorter of two delays, where one of 0 (or less) stands for none.
func sooner(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// reconcileDeleted removes every instance of a fleet that no longer exists.
func (c *Controller) reconcileDeleted(ctx context.Context, name string) (Result, error) {
	s := &scope{c: c, ctx: ctx, object: "Fleet/" + name}
	s.records = c.fleetInstances(name)
	if err := s.observe(c.opts.Providers); err != nil {
		return Result{}, err
	}
	s.fleet = &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: name}}
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
	if err := s.commit(); err != nil {
		return Result{}, err
	}
	if c.opts.Targets != nil {
		c.opts.Targets.RemoveFleet(name)
	}
	s.callProviders()
	if err := s.commit(); err != nil {
		return Result{}, err
	}
	if len(s.records) == 0 {
		c.healing.Delete(name)
		c.mu.Lock()
		delete(c.instances, name)
		c.mu.Unlock()
		return Result{}, errors.Join(s.errs...)
	}
	return Result{RequeueAfter: c.opts.PollInterval}, errors.Join(s.errs...)
}

// providersOf returns the providers a fleet's instances may be on: its regions' and those of its
// existing records.
func (c *Controller) providersOf(f *v1alpha1.Fleet, records map[string]*v1alpha1.Instance) map[string]provider.Provider {
	out := map[string]provider.Provider{}
	for _, r := range f.Spec.Regions {
		if p, ok := c.opts.Providers[r.Provider]; ok {
			out[r.Provider] = p
		}
	}
	for _, in := range records {
		if p, ok := c.opts.Providers[in.Spec.Provider]; ok {
			out[in.Spec.Provider] = p
		}
	}
	return out
}

// scope is one reconcile's view of a fleet.
type scope struct {
	c        *Controller
	ctx      context.Context
	fleet    *v1alpha1.Fleet
	stored   *v1alpha1.Fleet // as stored; the status is written onto it
	object   string
	revision string

	records  map[string]*v1alpha1.Instance
	observed map[string]provider.Instance
	// observedBy names the provider each observed instance came from.
	observedBy map[string]string

	dirty   map[string]bool // records to write
	removed map[string]*v1alpha1.Instance
	errs    []error

	// healRecheck, when > 0, is when an instance not yet due for healing may become due.
	healRecheck time.Duration

	// ro is the rollout's state after this reconcile (rollout.go); requeue, when > 0, is when a
	// rollout step is due.
	ro      *v1alpha1.RolloutStatus
	requeue time.Duration

	// Events wait until what they describe is stored (events.go).
	recordEvents, statusEvents []event
}

func (s *scope) observe(providers map[string]provider.Provider) error {
	s.observed = map[string]provider.Instance{}
	s.observedBy = map[string]string{}
	for name, p := range providers {
		list, err := p.List(s.ctx, provider.ListOptions{Fleet: s.fleetName()})
		if err != nil {
			return fmt.Errorf("list instances of fleet %s on provider %s: %w", s.fleetName(), name, err)
		}
		for _, in := range list {
			s.observed[in.Name] = in
			s.observedBy[in.Name] = name
		}
	}
	return nil
}

func (s *scope) fleetName() string {
	if s.fleet != nil {
		return s.fleet.Metadata.Name
	}
	return s.object[len("Fleet/"):]
}

func (s *scope) mark(in *v1alpha1.Instance) {
	if s.dirty == nil {
		s.dirty = map[string]bool{}
	}
	s.dirty[in.Metadata.Name] = true
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

// scale creates and deletes instances so that the current revision has the desired count, moving
// from older revisions as a rolling update bounded by maxSurge and maxUnavailable.
func (s *scope) scale() {
	spec := s.fleet.Spec
	desired := int(*spec.Replicas.Desired)
	maxSurge := int(*spec.Rollout.MaxSurge)
	maxUnavailable := int(*spec.Rollout.MaxUnavailable)

	var cur, old []*v1alpha1.Instance
	for _, in := range s.records {
		if !holdsSlot(in) {
			continue
		}
		if in.Spec.Revision == s.revision {
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
		region := s.fleet.DefaultRegion()
		for range toCreate {
			s.newRecord(region)
		}
		s.event(s.object, v1alpha1.EventNormal, "ScalingUp", "creating %d instances of revision %s (desired %d)", toCreate, s.revision, desired)
	}

	if extra := len(cur) - desired; extra > 0 {
		sortForRemoval(cur)
		for _, in := range cur[:extra] {
			s.terminate(in, "")
		}
		s.event(s.object, v1alpha1.EventNormal, "ScalingDown", "deleting %d instances (desired %d)", extra, desired)
	}
	if len(old) == 0 {
		// Not during a rolling update: warm instances are of the current revision only.
		s.refillWarm(warm, s.c.opts.MaxConcurrentCreates-max(toCreate, 0))
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
			s.event(s.object, v1alpha1.EventNormal, "RollingUpdate", "deleting %d instances of older revisions for %s", removed, s.revision)
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

func (s *scope) newRecord(region v1alpha1.Region) *v1alpha1.Instance {
	return s.newRecordOf(region, s.revision, s.fleet.Spec.Image)
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

// commit writes every changed record and every removal in one transaction, then updates the
// controller's index. Nothing is written when nothing changed.
func (s *scope) commit() error {
	if len(s.dirty) == 0 && len(s.removed) == 0 {
		s.emit(&s.recordEvents)
		return nil
	}
	var ops []store.Op
	var written []*v1alpha1.Instance
	for name := range s.dirty {
		in := s.records[name]
		op, err := store.PutOp(store.Instances, in)
		if err != nil {
			return err
		}
		ops = append(ops, op)
		written = append(written, in)
	}
	var deleted []*v1alpha1.Instance
	for _, in := range s.removed {
		if in.Metadata.ResourceVersion == 0 {
			continue // never stored
		}
		ops = append(ops, store.Op{Type: store.OpDelete, Kind: store.Instances, Name: in.Metadata.Name, ResourceVersion: in.Metadata.ResourceVersion})
		deleted = append(deleted, in)
	}
	recs, err := s.c.opts.Store.Txn(s.ctx, ops...)
	if err != nil {
		// The index no longer matches the store (which only this controller writes, so this is
		// rare): reload the fleet's records before the retry.
		s.c.reloadFleet(s.ctx, s.fleetName())
		return fmt.Errorf("write instances of fleet %s: %w", s.fleetName(), err)
	}
	s.c.mu.Lock()
	for i, in := range written {
		in.Metadata.ResourceVersion = recs[i].ResourceVersion
		cp := *in
		s.c.cacheLocked(&cp)
	}
	for _, in := range deleted {
		delete(s.c.instances[in.Spec.Fleet], in.Metadata.Name)
	}
	s.c.mu.Unlock()
	s.dirty = nil
	s.removed = nil
	s.emit(&s.recordEvents)
	return nil
}

// reloadFleet replaces the index entries of one fleet with what the store holds.
func (c *Controller) reloadFleet(ctx context.Context, fleet string) {
	insts, _, err := store.ListObjects[v1alpha1.Instance](ctx, c.opts.Store, store.Instances)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.instances, fleet)
	for _, in := range insts {
		if in.Spec.Fleet == fleet {
			c.cacheLocked(in)
		}
	}
}

// callProviders creates Pending records that the provider does not have yet and finishes deleting
// Terminating ones. Calls run in parallel, bounded; failures are kept on the record and retried.
func (s *scope) callProviders() {
	type call struct {
		in     *v1alpha1.Instance
		create bool
	}
	var calls []call
	for _, in := range s.records {
		_, exists := s.observed[in.Metadata.Name]
		switch {
		case in.Status.Phase == v1alpha1.PhaseTerminating:
			if s.c.opts.Targets != nil && !s.c.opts.Targets.Drained(in.Metadata.Name) {
				continue // still finishing requests; busy() brings the fleet back soon
			}
			calls = append(calls, call{in, false})
		case in.Status.Phase == v1alpha1.PhasePending && !exists:
			calls = append(calls, call{in, true})
		}
	}
	if len(calls) == 0 {
		return
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, providerCallParallelism)
	createErrs, deleteErrs := 0, 0
	var firstCreateErr error
	for _, cl := range calls {
		p, ok := s.c.opts.Providers[cl.in.Spec.Provider]
		if !ok {
			err := fmt.Errorf("instance %s: provider %q is not running in this control plane (start herd up with --provider %s)", cl.in.Metadata.Name, cl.in.Spec.Provider, cl.in.Spec.Provider)
			mu.Lock()
			s.errs = append(s.errs, err)
			mu.Unlock()
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			in := cl.in
			if cl.create {
				o, err := p.Create(s.ctx, provider.InstanceSpec{
					Name: in.Metadata.Name, Labels: in.Metadata.Labels, Image: in.Spec.Image,
					Region: in.Spec.Region, Options: s.regionOptions(in.Spec.Region),
				})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					createErrs++
					if firstCreateErr == nil {
						firstCreateErr = err
					}
					if in.Status.LastError != err.Error() {
						in.Status.LastError = err.Error()
						s.mark(in)
					}
					return
				}
				s.observed[in.Metadata.Name] = o
				s.apply(in, o)
				s.mark(in)
				return
			}
			err := p.Delete(s.ctx, in.Metadata.Name)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				deleteErrs++
				s.errs = append(s.errs, fmt.Errorf("delete instance %s: %w", in.Metadata.Name, err))
				return
			}
			delete(s.observed, in.Metadata.Name)
			s.remove(in)
		}()
	}
	wg.Wait()
	if createErrs > 0 {
		s.errs = append(s.errs, fmt.Errorf("create %d instances of fleet %s: %w", createErrs, s.fleetName(), firstCreateErr))
		s.event(s.object, v1alpha1.EventWarning, "CreateFailed", "%d instances could not be created: %v", createErrs, firstCreateErr)
	}
	if deleteErrs > 0 {
		s.event(s.object, v1alpha1.EventWarning, "DeleteFailed", "%d instances could not be deleted; retrying", deleteErrs)
	}
}

func (s *scope) regionOptions(region string) map[string]string {
	if s.fleet == nil {
		return nil
	}
	for _, r := range s.fleet.Spec.Regions {
		if r.Name == region {
			return r.Options
		}
	}
	return nil
}

// busy reports whether some instance is on its way somewhere, so the fleet is looked at again soon.
func (s *scope) busy() bool {
	for _, in := range s.records {
		switch in.Status.Phase {
		case v1alpha1.PhasePending, v1alpha1.PhaseBooting, v1alpha1.PhaseTerminating:
			return true
		}
	}
	return len(s.errs) > 0
}

func (s *scope) sorted() []*v1alpha1.Instance {
	out := make([]*v1alpha1.Instance, 0, len(s.records))
	for _, in := range s.records {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Metadata.Name < out[j].Metadata.Name })
	return out
}

// writeStatus computes the fleet's status from its records and writes it if it changed.
func (s *scope) writeStatus() error {
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
		if ready(in) {
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
	desired := *f.Spec.Replicas.Desired
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
	now := s.c.clock.Now().UTC()
	st.Healing = s.healState().status(now)
	st.History = s.history(now)
	prev := s.stored.Status
	prev.LastReconcile = nil
	if reflect.DeepEqual(prev, st) {
		s.emit(&s.statusEvents)
		return nil
	}
	st.LastReconcile = &now
	s.stored.Status = st
	op, err := store.PutOp(store.Fleets, s.stored)
	if err != nil {
		return err
	}
	recs, err := s.c.opts.Store.Txn(s.ctx, op)
	if err != nil {
		// A conflict means the user changed the fleet meanwhile: the watch requeues it, and the
		// status events are noted again by that reconcile if they still hold.
		if errors.Is(err, store.ErrConflict) {
			return nil
		}
		return fmt.Errorf("write status of fleet %s: %w", f.Metadata.Name, err)
	}
	s.c.statusWrites.Store(f.Metadata.Name, recs[0].ResourceVersion)
	s.emit(&s.statusEvents)
	return nil
}
