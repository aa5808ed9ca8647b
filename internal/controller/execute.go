package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
)

// providerCallParallelism bounds concurrent provider calls within one reconcile.
const providerCallParallelism = 16

// execute carries a plan out in the crash-safe order: the records first (a new instance is
// recorded, with its name, before a provider is asked for it), then the load balancer (it learns
// of new and terminating instances before any is deleted, so that deletions wait for their
// drain), then the providers, then the records again with what the providers answered, and last
// the fleet's status. Events are recorded after the write of what they describe.
func (s *scope) execute(p *plan) (Result, error) {
	c := s.c
	if err := s.commit(); err != nil {
		return Result{}, err
	}
	s.emitAll(p.RecordEvents)
	if c.opts.Targets != nil {
		c.opts.Targets.SetFleetTargets(s.fleet, p.Targets, p.Weights)
	}
	s.callProviders(p.Create, p.Delete)
	if err := s.commit(); err != nil {
		return Result{}, err
	}
	s.emit(&s.recordEvents) // the providers' failures, now kept on the records
	if c.opts.Targets != nil {
		c.opts.Targets.SetFleetTargets(s.fleet, s.sorted(), p.Weights)
	}
	now := c.clock.Now().UTC()
	stored, err := s.writeStatus(s.fleetStatus(now), now)
	if err != nil {
		return Result{}, err
	}
	if stored {
		s.emitAll(p.StatusEvents)
	}
	// A settled fleet is looked at again when something changes or at the safety resync; a busy
	// one sooner, and so is one whose providers were just asked to create or delete (the plan was
	// made before: a deletion finished here frees the next rollout step, and nothing else would
	// say so), and one whose listeners the load balancer refused: a port taken on the host frees
	// without anything telling the controller, so binding it is retried.
	res := Result{}
	acted := len(p.Create) > 0 || len(p.Delete) > 0
	if s.busy() || acted || (c.opts.Targets != nil && c.opts.Targets.ListenerError(s.fleetName()) != nil) {
		res.RequeueAfter = c.opts.PollInterval
	}
	res.RequeueAfter = sooner(sooner(res.RequeueAfter, p.Requeue), s.healRequeue())
	if s.awaitsServing() {
		res.RequeueAfter = sooner(res.RequeueAfter, c.opts.HealthPollInterval)
	}
	return res, errors.Join(s.errs...)
}

// executeDeleted carries out the plan of a deleted fleet: its instances are marked Terminating,
// taken out of the load balancer and deleted; the controller forgets the fleet once none is left.
func (s *scope) executeDeleted(p *plan) (Result, error) {
	c, name := s.c, s.fleetName()
	if err := s.commit(); err != nil {
		return Result{}, err
	}
	s.emitAll(p.RecordEvents)
	if c.opts.Targets != nil {
		c.opts.Targets.RemoveFleet(name)
	}
	s.callProviders(p.Create, p.Delete)
	if err := s.commit(); err != nil {
		return Result{}, err
	}
	s.emit(&s.recordEvents)
	if len(s.records) == 0 {
		c.healing.Delete(name)
		c.fleetRegions.Delete(name)
		c.fleetKept.Delete(name)
		c.mu.Lock()
		delete(c.instances, name)
		c.mu.Unlock()
		return Result{}, errors.Join(s.errs...)
	}
	return Result{RequeueAfter: c.opts.PollInterval}, errors.Join(s.errs...)
}

// commit writes every changed record and every removal, then updates the controller's index.
// Nothing is written when nothing changed. The writes go in one transaction (one fsync on bbolt)
// unless the store limits the ops of a transaction (etcd's --max-txn-ops): then in as few as fit.
// Each record is crash-safe on its own (see the package comment), so a fleet's records need not be
// written atomically; the index is updated transaction by transaction, so it matches the store
// even when a later one fails.
func (s *scope) commit() error {
	if len(s.dirty) == 0 && len(s.removed) == 0 {
		return nil
	}
	var ops []store.Op
	var touched []*v1alpha1.Instance // the record of each op, in op order
	for _, name := range sortedKeys(s.dirty) {
		in := s.records[name]
		op, err := store.PutOp(store.Instances, in)
		if err != nil {
			return err
		}
		ops = append(ops, op)
		touched = append(touched, in)
	}
	for _, name := range sortedKeys(s.removed) {
		in := s.removed[name]
		if in.Metadata.ResourceVersion == 0 {
			continue // never stored
		}
		ops = append(ops, store.Op{Type: store.OpDelete, Kind: store.Instances, Name: in.Metadata.Name, ResourceVersion: in.Metadata.ResourceVersion})
		touched = append(touched, in)
	}
	size := store.MaxTxnOps(s.c.opts.Store)
	if size <= 0 {
		size = len(ops)
	}
	for from := 0; from < len(ops); from += size {
		to := min(from+size, len(ops))
		recs, err := s.c.opts.Store.Txn(s.ctx, ops[from:to]...)
		if err != nil {
			// The index no longer matches the store (which only this controller writes, so this
			// is rare): reload the fleet's records before the retry.
			s.c.reloadFleet(s.ctx, s.fleetName())
			return fmt.Errorf("write instances of fleet %s: %w", s.fleetName(), err)
		}
		s.c.mu.Lock()
		for i, op := range ops[from:to] {
			in := touched[from+i]
			if op.Type == store.OpDelete {
				delete(s.c.instances[in.Spec.Fleet], in.Metadata.Name)
				continue
			}
			in.Metadata.ResourceVersion = recs[i].ResourceVersion
			cp := *in
			s.c.cacheLocked(&cp)
		}
		s.c.mu.Unlock()
	}
	s.dirty = nil
	s.removed = nil
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

// callProviders creates the instances of Pending records that the providers do not have yet and
// finishes deleting those of Terminating records. Calls run in parallel, bounded; failures are kept on the record and retried.
func (s *scope) callProviders(create, del []*v1alpha1.Instance) {
	type call struct {
		in     *v1alpha1.Instance
		create bool
	}
	var calls []call
	for _, in := range del {
		if s.c.opts.Targets != nil && !s.c.opts.Targets.Drained(in.Metadata.Name) {
			continue // still finishing requests; busy() brings the fleet back soon
		}
		calls = append(calls, call{in, false})
	}
	for _, in := range create {
		calls = append(calls, call{in, true})
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
			start := time.Now()
			if cl.create {
				o, err := p.Create(s.ctx, provider.InstanceSpec{
					Name: in.Metadata.Name, Labels: in.Metadata.Labels, Image: in.Spec.Image,
					Region: in.Spec.Region, Options: s.regionOptions(in.Spec.Region),
				})
				s.c.observeCall(in.Spec.Provider, "create", start, err)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					s.noteProviderErr(in, err)
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
			s.c.observeCall(in.Spec.Provider, "delete", start, err)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				s.noteProviderErr(in, err)
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

// noteProviderErr keeps the first provider error of a reconcile in an instance's region, for
// status.regions. The caller holds the lock of the calls' results.
func (s *scope) noteProviderErr(in *v1alpha1.Instance, err error) {
	if r := s.regions[s.regionOf(in)]; r != nil && r.providerErr == nil {
		r.providerErr = fmt.Errorf("region %s: %w", r.region.Name, err)
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
