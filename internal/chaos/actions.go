package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
)

// check validates spec (filling the default duration) against what exists: the target, a
// provider that can do the action, no other active action on the same region or fleet.
func (e *Engine) check(ctx context.Context, spec *v1alpha1.ChaosActionSpec) error {
	if !provider.ValidName(spec.Target) {
		return refuse("target %q: name a region, instance or fleet (a DNS label)", spec.Target)
	}
	switch spec.Action {
	case v1alpha1.ChaosKillInstance:
		if spec.Duration.Duration != 0 {
			return refuse("--duration: kill-instance is not undone (the controller replaces the instance); leave --duration out")
		}
		if spec.Latency.Duration != 0 || spec.Loss != 0 {
			return refuse("--latency and --loss are for degrade-region only")
		}
		_, err := e.killer(ctx, spec.Target)
		return err
	case v1alpha1.ChaosPartitionRegion, v1alpha1.ChaosDegradeRegion, v1alpha1.ChaosPauseHealth:
	default:
		return refuse("action %q: use one of %s, %s, %s, %s", spec.Action, v1alpha1.ChaosPartitionRegion,
			v1alpha1.ChaosDegradeRegion, v1alpha1.ChaosKillInstance, v1alpha1.ChaosPauseHealth)
	}
	if spec.Duration.Duration == 0 {
		spec.Duration.Duration = DefaultDuration
	}
	if d := spec.Duration.Duration; d < MinDuration || d > MaxDuration {
		return refuse("--duration %s: must be between %s and %s", d, MinDuration, MaxDuration)
	}
	switch spec.Action {
	case v1alpha1.ChaosDegradeRegion:
		if l := spec.Latency.Duration; l < 0 || l > MaxLatency {
			return refuse("--latency %s: must be between 0 and %s", l, MaxLatency)
		}
		if spec.Loss < 0 || spec.Loss > 1 || spec.Loss != spec.Loss {
			return refuse("--loss %v: must be between 0%% and 100%%", spec.Loss*100)
		}
		if spec.Latency.Duration == 0 && spec.Loss == 0 {
			return refuse("degrade-region needs --latency or --loss (e.g. --latency 300ms --loss 20%%)")
		}
	default:
		if spec.Latency.Duration != 0 || spec.Loss != 0 {
			return refuse("--latency and --loss are for degrade-region only")
		}
	}
	if spec.Action == v1alpha1.ChaosPauseHealth {
		if _, err := store.GetObject[v1alpha1.Fleet](ctx, e.opts.Store, store.Fleets, spec.Target); errors.Is(err, store.ErrNotFound) {
			return refuse("fleet %q not found: herd get fleets lists them", spec.Target)
		} else if err != nil {
			return err
		}
	} else if _, err := e.regionChaos(ctx, spec.Target); err != nil {
		return err
	}
	return e.checkOverlap(ctx, *spec)
}

// checkOverlap refuses a second active action on a region (two would undo each other) or a
// second pause of a fleet.
func (e *Engine) checkOverlap(ctx context.Context, spec v1alpha1.ChaosActionSpec) error {
	list, err := e.List(ctx)
	if err != nil {
		return err
	}
	pause := spec.Action == v1alpha1.ChaosPauseHealth
	for _, a := range list {
		if a.Status.Phase != v1alpha1.ChaosActive || a.Spec.Target != spec.Target || (a.Spec.Action == v1alpha1.ChaosPauseHealth) != pause {
			continue
		}
		return refuse("%s %s: chaos action %s (%s) is active on it; stop it first: herd chaos stop %s",
			spec.Action, spec.Target, a.Metadata.Name, a.Spec.Action, a.Metadata.Name)
	}
	return nil
}

// regionChaos returns the networks of the provider that runs region, if its regions are networks.
func (e *Engine) regionChaos(ctx context.Context, region string) (regionnet.Chaos, error) {
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, e.opts.Store, store.Fleets)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range fleets {
		for _, r := range f.Spec.Regions {
			if r.Name != region {
				if !slices.Contains(names, r.Name) {
					names = append(names, r.Name)
				}
				continue
			}
			rc, ok := e.opts.Networks[r.Provider]
			if !ok {
				return nil, refuse("region %s runs on provider %q, whose regions are not networks: only the local provider's regions can be partitioned or degraded", region, r.Provider)
			}
			return rc, nil
		}
	}
	slices.Sort(names)
	return nil, refuse("region %q: no fleet runs in it (regions in use: %v)", region, names)
}

// killer returns the provider of an instance, if it can kill it.
func (e *Engine) killer(ctx context.Context, name string) (provider.InstanceKiller, error) {
	in, err := store.GetObject[v1alpha1.Instance](ctx, e.opts.Store, store.Instances, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, refuse("instance %q not found: herd get instances lists them", name)
	}
	if err != nil {
		return nil, err
	}
	k, ok := e.opts.Providers[in.Spec.Provider].(provider.InstanceKiller)
	if !ok {
		return nil, refuse("instance %s runs on provider %q, which cannot kill an instance", name, in.Spec.Provider)
	}
	return k, nil
}

// do carries the action out. pause-health is done by reconcile, which tells the pausers.
func (e *Engine) do(ctx context.Context, a *v1alpha1.ChaosAction) error {
	s := a.Spec
	switch s.Action {
	case v1alpha1.ChaosPartitionRegion, v1alpha1.ChaosDegradeRegion:
		rc, err := e.regionChaos(ctx, s.Target)
		if err != nil {
			return err
		}
		if s.Action == v1alpha1.ChaosPartitionRegion {
			return rc.Partition(ctx, s.Target)
		}
		return rc.Degrade(ctx, s.Target, s.Latency.Duration, s.Loss)
	case v1alpha1.ChaosKillInstance:
		k, err := e.killer(ctx, s.Target)
		if err != nil {
			return err
		}
		return k.KillInstance(ctx, s.Target)
	}
	return nil
}

// undo undoes what do did; undoing what is not in force does nothing.
func (e *Engine) undo(ctx context.Context, a *v1alpha1.ChaosAction) error {
	switch a.Spec.Action {
	case v1alpha1.ChaosPartitionRegion, v1alpha1.ChaosDegradeRegion:
		rc, err := e.regionChaos(ctx, a.Spec.Target)
		var re *RequestError
		if errors.As(err, &re) {
			return nil // no fleet runs in the region any more: its network went with them
		}
		if err != nil {
			return err
		}
		if err := rc.Restore(context.WithoutCancel(ctx), a.Spec.Target); err != nil {
			return fmt.Errorf("restore region %s: %w", a.Spec.Target, err)
		}
	}
	return nil
}
