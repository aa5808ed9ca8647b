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

// The orphan collector deletes what the providers run that no fleet owns, as Kubernetes' garbage
// collector deletes what has no owner: an instance with no record whose fleet would not adopt it
// (its fleet does not exist, it has no fleet label, or its region is not one the fleet runs in).
// Such instances are left by a harness or a process killed at the wrong moment, by a store
// restored from an older copy, or by a fleet deleted while its provider could not be reached; on
// their own they would run forever. An instance of a fleet that exists, in one of the fleet's
// regions, is no orphan: the fleet's next reconcile adopts it (records.go).
//
// A pass lists each provider once (no call per instance), and compares with the records the
// controller holds after the lists returned. Since the controller records an instance before it
// asks a provider for it, a create in flight always has its record by then. An orphan is reported
// once (OrphanFound, with when it goes) and deleted after Options.OrphanGrace, once the store still
// holds no record of it: a margin for what no record can cover, such as another control plane's
// create on the same provider. Passes run at start, at every resync, and when an orphan is due.

// OrphanObserver is told what the collector finds and deletes: herd up counts it in /metrics.
type OrphanObserver interface {
	// OrphansFound is told, after each pass, how many orphans a provider runs.
	OrphansFound(provider string, n int)
	// OrphanDeleted is told of each orphan deleted.
	OrphanDeleted(provider string)
}

// orphanRetry is how soon a deletion that failed is tried again, at the least.
const orphanRetry = 30 * time.Second

// orphans is the collector's state: the orphans found and not yet gone, by provider and name.
type orphans struct {
	mu    sync.Mutex
	found map[orphanKey]*v1alpha1.Orphan
	// kick asks for a pass (the resync); passes counts them, for tests.
	kick   chan struct{}
	passes int64
}

type orphanKey struct{ provider, name string }

// Orphans returns the orphans the collector knows of, by provider and name: what `herd get
// instances --orphans` lists.
func (c *Controller) Orphans() []v1alpha1.Orphan {
	c.orphans.mu.Lock()
	defer c.orphans.mu.Unlock()
	out := make([]v1alpha1.Orphan, 0, len(c.orphans.found))
	for _, o := range c.orphans.found {
		out = append(out, *o)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Provider != out[j].Provider {
			return out[i].Provider < out[j].Provider
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// collectOrphans runs passes until ctx ends: one now, then one at each kick and when the next
// orphan is due.
func (c *Controller) collectOrphans(ctx context.Context) {
	for {
		next := c.orphanPass(ctx)
		var due <-chan time.Time
		stop := func() bool { return false }
		if next > 0 {
			t := c.clock.NewTimer(next)
			due, stop = t.C(), t.Stop
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-c.orphans.kick:
		case <-due:
		}
		stop()
	}
}

// kickOrphans asks for a pass without waiting for it.
func (c *Controller) kickOrphans() {
	select {
	case c.orphans.kick <- struct{}{}:
	default: // one is asked for already
	}
}

// orphanPass finds the orphans, deletes those that are due, and returns how soon the next one is
// due (0: none is).
func (c *Controller) orphanPass(ctx context.Context) time.Duration {
	lists := map[string][]provider.Instance{}
	for _, name := range sortedKeys(c.opts.Providers) {
		start := time.Now()
		list, err := c.opts.Providers[name].List(ctx, provider.ListOptions{})
		c.observeCall(name, "list", start, err)
		if err != nil {
			if ctx.Err() == nil {
				c.log.Warn("orphans: listing a provider's instances failed; its orphans wait for the next pass", "provider", name, "err", err)
			}
			continue
		}
		lists[name] = list
	}
	// The records are read after the lists: any instance listed was recorded before it was asked
	// for, so its record is here unless it has none.
	owned := c.recordNames()
	now := c.clock.Now().UTC()

	var due []*v1alpha1.Orphan
	o := &c.orphans
	o.mu.Lock()
	o.passes++
	counts := map[string]int{}
	for prov, list := range lists {
		seen := map[string]bool{}
		for _, in := range list {
			if owned[in.Name] {
				continue
			}
			why := c.orphanWhy(prov, in)
			if why == "" {
				continue
			}
			seen[in.Name] = true
			counts[prov]++
			k := orphanKey{prov, in.Name}
			found := o.found[k]
			if found == nil {
				found = c.foundOrphan(prov, in, why, now)
				o.found[k] = found
			}
			found.State, found.Why = string(in.State), why
			if found.DeleteAt != nil && !now.Before(*found.DeleteAt) {
				due = append(due, found)
			}
		}
		for k := range o.found {
			if k.provider == prov && !seen[k.name] {
				delete(o.found, k) // gone, or owned now
			}
		}
	}
	o.mu.Unlock()
	if c.opts.Orphans != nil {
		for prov := range lists {
			c.opts.Orphans.OrphansFound(prov, counts[prov])
		}
	}
	c.deleteOrphans(ctx, due)
	return c.nextOrphanDue()
}

// foundOrphan makes the collector's entry of an orphan found now, and says so once.
func (c *Controller) foundOrphan(prov string, in provider.Instance, why string, now time.Time) *v1alpha1.Orphan {
	o := &v1alpha1.Orphan{
		Name: in.Name, Provider: prov, Fleet: in.Labels[v1alpha1.LabelFleet], Region: in.Region,
		Image: in.Image, State: string(in.State), Why: why, FoundAt: now,
	}
	if o.Region == "" {
		o.Region = in.Labels[v1alpha1.LabelRegion]
	}
	if !in.CreatedAt.IsZero() {
		t := in.CreatedAt.UTC()
		o.CreatedAt = &t
	}
	if c.opts.KeepOrphans {
		c.events.Eventf("Instance/"+in.Name, v1alpha1.EventWarning, "OrphanFound",
			"%s: no fleet owns it (%s); kept, as herd up runs with --orphans=keep", describeOrphan(o), why)
		return o
	}
	at := now.Add(c.opts.OrphanGrace)
	o.DeleteAt = &at
	c.events.Eventf("Instance/"+in.Name, v1alpha1.EventWarning, "OrphanFound",
		"%s: no fleet owns it (%s); deleting it at %s unless a fleet owns it by then", describeOrphan(o), why, at.Format(time.RFC3339))
	return o
}

// describeOrphan says what an orphan is, for its events.
func describeOrphan(o *v1alpha1.Orphan) string {
	s := fmt.Sprintf("instance %s of provider %s", o.Name, o.Provider)
	if o.Region != "" {
		s += " in region " + o.Region
	}
	if o.Fleet != "" {
		s += " labelled fleet " + o.Fleet
	}
	if o.Image != "" {
		s += ", image " + o.Image
	}
	if o.CreatedAt != nil {
		s += ", created " + o.CreatedAt.Format(time.RFC3339)
	}
	return s
}

// orphanWhy says why an instance without a record is an orphan, or "" when its fleet's reconcile
// adopts it: its fleet exists and lists the instance's provider and region (the spec's regions,
// and those its records are in).
func (c *Controller) orphanWhy(prov string, in provider.Instance) string {
	fleet, region := in.Labels[v1alpha1.LabelFleet], in.Labels[v1alpha1.LabelRegion]
	if fleet == "" {
		return "it has no " + v1alpha1.LabelFleet + " label"
	}
	f, ok := c.inf.Fleet(fleet)
	if !ok {
		return fmt.Sprintf("fleet %s does not exist", fleet)
	}
	for _, rg := range f.Spec.Regions {
		if rg.Name == region && rg.Provider == prov {
			return ""
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, r := range c.instances[fleet] {
		if r.Spec.Region == region && r.Spec.Provider == prov {
			return ""
		}
	}
	return fmt.Sprintf("fleet %s does not run in region %q of provider %s", fleet, region, prov)
}

// recordNames returns the name of every instance the controller has a record of.
func (c *Controller) recordNames() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, byName := range c.instances {
		n += len(byName)
	}
	out := make(map[string]bool, n)
	for _, byName := range c.instances {
		for name := range byName {
			out[name] = true
		}
	}
	return out
}

// deleteOrphans deletes the orphans that are due, a few at a time, each once the store confirms
// it still holds no record of it.
func (c *Controller) deleteOrphans(ctx context.Context, due []*v1alpha1.Orphan) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, providerCallParallelism)
	for _, o := range due {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.deleteOrphan(ctx, o)
		}()
	}
	wg.Wait()
}

func (c *Controller) deleteOrphan(ctx context.Context, o *v1alpha1.Orphan) {
	c.orphans.mu.Lock()
	name, prov := o.Name, o.Provider
	desc := describeOrphan(o)
	c.orphans.mu.Unlock()
	_, err := c.opts.Store.Get(ctx, store.Instances, name)
	switch {
	case err == nil:
		c.forgetOrphan(prov, name) // recorded meanwhile: owned
		return
	case !errors.Is(err, store.ErrNotFound):
		c.orphanDeleteFailed(o, fmt.Errorf("check its record: %w", err))
		return
	}
	start := time.Now()
	err = c.opts.Providers[prov].Delete(ctx, name)
	c.observeCall(prov, "delete", start, err)
	if err != nil {
		if ctx.Err() == nil {
			c.orphanDeleteFailed(o, err)
		}
		return
	}
	c.forgetOrphan(prov, name)
	c.events.Eventf("Instance/"+name, v1alpha1.EventNormal, "OrphanDeleted", "deleted %s, which no fleet owned", desc)
	if c.opts.Orphans != nil {
		c.opts.Orphans.OrphanDeleted(prov)
	}
}

// orphanDeleteFailed keeps an orphan whose deletion failed, to try again later.
func (c *Controller) orphanDeleteFailed(o *v1alpha1.Orphan, err error) {
	c.orphans.mu.Lock()
	at := c.clock.Now().UTC().Add(max(orphanRetry, c.opts.RetryMax))
	o.DeleteAt, o.LastError = &at, err.Error()
	desc := describeOrphan(o)
	c.orphans.mu.Unlock()
	c.events.Eventf("Instance/"+o.Name, v1alpha1.EventWarning, "OrphanDeleteFailed", "%s could not be deleted, trying again at %s: %v", desc, at.Format(time.RFC3339), err)
}

func (c *Controller) forgetOrphan(prov, name string) {
	c.orphans.mu.Lock()
	defer c.orphans.mu.Unlock()
	delete(c.orphans.found, orphanKey{prov, name})
}

// nextOrphanDue returns how soon the next orphan is due for deletion, 0 when none is.
func (c *Controller) nextOrphanDue() time.Duration {
	c.orphans.mu.Lock()
	defer c.orphans.mu.Unlock()
	var next time.Duration
	now := c.clock.Now()
	for _, o := range c.orphans.found {
		if o.DeleteAt != nil {
			next = sooner(next, max(o.DeleteAt.Sub(now), time.Millisecond))
		}
	}
	return next
}
