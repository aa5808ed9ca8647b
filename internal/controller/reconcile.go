package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
)

// Reconcile moves one fleet towards its spec in three steps: observe (the fleet from the store,
// its records from the controller's index, its instances from the providers), plan (adopt what the
// providers run, refresh statuses, heal, roll out or scale, compute the status: plan.go and its phases, no I/O),
// and execute (records, then providers, then records, then the status: execute.go). It is safe to
// call again at any point; errors are retried by the caller with backoff.
func (c *Controller) Reconcile(ctx context.Context, name string) (Result, error) {
	s, err := c.observe(ctx, name)
	if err != nil {
		return Result{}, err
	}
	if s.deleted {
		return s.executeDeleted(s.planDeleted())
	}
	return s.execute(s.plan())
}

// observe reads everything a reconcile of one fleet starts from into a new scope.
func (c *Controller) observe(ctx context.Context, name string) (*scope, error) {
	rec, err := c.opts.Store.Get(ctx, store.Fleets, name)
	if errors.Is(err, store.ErrNotFound) {
		// Every provider is asked: the fleet's regions are gone with it.
		s := &scope{c: c, ctx: ctx, object: "Fleet/" + name, deleted: true}
		s.records = c.fleetInstances(name)
		if err := s.list(c.opts.Providers); err != nil {
			return nil, err
		}
		s.fleet = &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: name}}
		return s, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get fleet %s: %w", name, err)
	}
	// Two copies: the one reconciled (defaulted, image resolved) and the one the status is written
	// onto, which keeps the spec exactly as the user applied it.
	fleet, err := store.DecodeRecord[v1alpha1.Fleet](rec)
	if err != nil {
		return nil, err
	}
	stored, err := store.DecodeRecord[v1alpha1.Fleet](rec)
	if err != nil {
		return nil, err
	}
	if fleet.Pinned == nil && c.opts.ResolveImage != nil {
		if err := c.pinStored(ctx, fleet); err != nil {
			return nil, err
		}
		return c.observe(ctx, name)
	}
	// Stored fleets are defaulted on write; defaulting again fills fields added since.
	v1alpha1.SetFleetDefaults(fleet, "")
	fleet.Spec.Image = fleet.BootImage() // in memory only: instances and the revision boot the pin
	s := &scope{c: c, ctx: ctx, fleet: fleet, stored: stored, object: "Fleet/" + name, revision: RevisionName(fleet)}
	s.records = c.fleetInstances(name)
	s.initRegions()
	s.listRegions()
	return s, nil
}

// pinStored pins the image of a fleet stored before images were pinned at apply, once, to the
// bundle its name resolves to now, which is what the controller has been running: the fleet keeps
// its revision, and a later build of the name no longer rolls it.
func (c *Controller) pinStored(ctx context.Context, f *v1alpha1.Fleet) error {
	name := f.Metadata.Name
	digest, err := c.opts.ResolveImage(f.Spec.Image)
	if err != nil {
		return fmt.Errorf("fleet %s: resolve image %q: %w", name, f.Spec.Image, err)
	}
	pin := &v1alpha1.PinnedImage{Ref: f.Spec.Image, Digest: digest, By: v1alpha1.PinnedByUpgrade, At: c.clock.Now().UTC()}
	written := false
	_, err = store.UpdateObject(ctx, c.opts.Store, store.Fleets, name, func(f *v1alpha1.Fleet) (bool, error) {
		if f.Pinned != nil || f.Spec.Image != pin.Ref {
			return false, nil // pinned, or applied anew, meanwhile
		}
		f.Pinned, written = pin, true
		return true, nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("fleet %s: pin image %q: %w", name, pin.Ref, err)
	}
	if written {
		c.events.Eventf("Fleet/"+name, "Normal", "ImagePinned",
			"spec.image %q pinned to %s, which it ran before images were pinned at apply: a new build of it now rolls the fleet only on herd apply or herd rollout restart %s", pin.Ref, pin.Digest, name)
	}
	return nil
}

// sooner returns the shorter of two delays, where one of 0 (or less) stands for none.
func sooner(a, b time.Duration) time.Duration {
	if a <= 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// scope is one reconcile's view of a fleet.
type scope struct {
	c        *Controller
	ctx      context.Context
	fleet    *v1alpha1.Fleet
	stored   *v1alpha1.Fleet // as stored; the status is written onto it
	object   string
	revision string
	// deleted is true when the fleet no longer exists: its instances go.
	deleted bool

	// regions are what this reconcile observed and decided of each region, by name, in
	// regionOrder (the spec's order, then regions only records are left in).
	regions     map[string]*regionState
	regionOrder []string

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

	// pinnedImages are the images of the revisions tenants are pinned to (tenancy.go), by revision.
	pinnedImages map[string]string

	// Events noted by planning or by provider calls, until a plan or the executor takes them
	// (events.go).
	recordEvents, statusEvents []event
}

// list reads what the providers run for the fleet.
func (s *scope) list(providers map[string]provider.Provider) error {
	s.observed = map[string]provider.Instance{}
	s.observedBy = map[string]string{}
	for name, p := range providers {
		start := time.Now()
		list, err := p.List(s.ctx, provider.ListOptions{Fleet: s.fleetName()})
		s.c.observeCall(name, "list", start, err)
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
