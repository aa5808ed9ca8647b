package autoscaler

import (
	"context"
	"fmt"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// A fleet in several regions is autoscaled region by region, as one Auto Scaling Group per cloud
// region is: each region's own load against its own instances, within its own min and max. The
// decision goes to spec.regions[].replicas.desired, the field the controller reads for the
// region, so that desired state has one home and the autoscaler's ownership of it (apply keeps it
// while autoscaling is on) is the same rule as for spec.replicas.desired.

// RegionLoadSource MAY be implemented by a LoadSource that counts each region of a fleet apart
// (its instances' requests summed): the loop then autoscales each region from its own load.
type RegionLoadSource interface {
	// RegionLoad is FleetLoad for the instances of one region of the fleet.
	RegionLoad(fleet, region string, window time.Duration) (load Load, ok bool)
}

// RegionInstanceView MAY be implemented by an InstanceView that counts each region apart; the
// controller does.
type RegionInstanceView interface {
	// RegionInstanceCounts is InstanceCounts for the instances of one region of the fleet.
	RegionInstanceCounts(fleet, region string) (ready, booting int)
}

// byRegion reports whether f is autoscaled region by region: it runs in several regions and the
// loop can see each region's load and instances.
func (l *Loop) byRegion(f *v1alpha1.Fleet) bool {
	_, loadOK := l.opts.Load.(RegionLoadSource)
	_, viewOK := l.opts.Instances.(RegionInstanceView)
	on := len(f.Spec.Regions) > 1 && loadOK && viewOK
	l.byRegionSeen[f.Metadata.Name] = on
	return on
}

// tickRegions samples each region of a defaulted, autoscaled fleet once and writes the regions'
// new desired counts.
func (l *Loop) tickRegions(ctx context.Context, f *v1alpha1.Fleet, fleetCfg Config) []error {
	var errs []error
	name := f.Metadata.Name
	for _, rg := range f.Spec.Regions {
		r := f.RegionReplicas(rg.Name)
		cfg := fleetCfg
		cfg.Min, cfg.Max = int(*r.Min), int(*r.Max)
		st := l.strategyFor(name+"/"+rg.Name, cfg)
		sample, ok := l.regionSample(name, rg.Name, cfg.Metric)
		if !ok {
			continue
		}
		sample.Desired = int(*r.Desired)
		d := st.Decide(sample)
		if d.Desired == sample.Desired {
			continue
		}
		if err := l.setRegionDesired(ctx, name, rg.Name, int32(d.Desired)); err != nil {
			errs = append(errs, err)
			continue
		}
		reason := ReasonScaledOut
		if d.Desired < sample.Desired {
			reason = ReasonScaledIn
		}
		l.opts.Events.Eventf("Fleet/"+name, v1alpha1.EventNormal, reason, "region %s: %s", rg.Name, d.Reason)
	}
	return errs
}

// regionSample observes one region of a fleet for its metric.
func (l *Loop) regionSample(fleet, region string, metric Metric) (s Sample, ok bool) {
	load, loadOK := l.opts.Load.(RegionLoadSource).RegionLoad(fleet, region, l.opts.Window)
	ready, booting := l.opts.Instances.(RegionInstanceView).RegionInstanceCounts(fleet, region)
	return l.sampleOf(fleet, metric, load, loadOK, ready, booting)
}

// setRegionDesired writes spec.regions[].replicas.desired of one region through
// store.UpdateFleetSpec, clamped to the region's current min and max.
func (l *Loop) setRegionDesired(ctx context.Context, fleet, region string, desired int32) error {
	d, written := desired, false
	_, err := store.UpdateFleetSpec(ctx, l.opts.Store, fleet, func(f *v1alpha1.Fleet) error {
		written = false
		if f.Spec.Autoscaling == nil {
			return nil // autoscaling was switched off meanwhile
		}
		for i := range f.Spec.Regions {
			rg := &f.Spec.Regions[i]
			if rg.Name != region {
				continue
			}
			r := f.RegionReplicas(region)
			d = min(max(desired, *r.Min), *r.Max)
			if rg.Replicas == nil {
				rg.Replicas = &v1alpha1.Replicas{}
			}
			written = rg.Replicas.Desired == nil || *rg.Replicas.Desired != d
			rg.Replicas.Desired = new(d)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("set desired of fleet %s in region %s to %d: %w", fleet, region, d, err)
	}
	if written {
		l.log.Info("fleet autoscaled", "fleet", fleet, "region", region, "desired", d)
	}
	return nil
}
