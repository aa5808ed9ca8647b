package v1alpha1

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

// Region phases (RegionStatus.Phase).
const (
	// RegionReady: the region runs its desired instances of its current revision, all ready.
	RegionReady = "Ready"
	// RegionScaling: instances are being created, deleted or replaced in the region.
	RegionScaling = "Scaling"
	// RegionPending: the region should run instances and has none yet.
	RegionPending = "Pending"
	// RegionDegraded: something in the region needs a person (a rollout rolled back there, or
	// instances that fail).
	RegionDegraded = "Degraded"
	// RegionProviderFailed: the region's provider failed to list or create instances; the
	// region's instances are left as they are until it answers again.
	RegionProviderFailed = "ProviderFailed"
	// RegionUnreachable: the region cannot be reached from where its users are (a partition).
	// Its instances are kept: a partition is not a death.
	RegionUnreachable = "Unreachable"
)

// RegionStatus is one region's group of instances as the controller last saw it.
type RegionStatus struct {
	// Name is the region's name (spec.regions[].name).
	Name string `json:"name"`
	// Desired is the number of instances the region should run now: its replicas.desired, or the
	// fleet's where the region does not override it.
	Desired int32 `json:"desired"`
	// Replicas counts the region's instances in rotation that are neither failed nor terminating.
	Replicas int32 `json:"replicas"`
	// ReadyReplicas counts its instances in rotation that serve (as FleetStatus.ReadyReplicas).
	ReadyReplicas int32 `json:"readyReplicas"`
	// CurrentRevision is the revision the region runs, or is moving to: during a wave, the old
	// revision until the wave reaches the region.
	CurrentRevision string `json:"currentRevision,omitempty"`
	// Phase is Ready, Scaling, Pending, Degraded, ProviderFailed or Unreachable.
	Phase string `json:"phase,omitempty"`
	// Message explains the phase when it is not Ready.
	Message string `json:"message,omitempty"`
	// Rollout is the region's part of a wave across regions (fleets in several regions only):
	// Waiting until the wave reaches it, then the strategy's progress inside the region.
	Rollout *RolloutStatus `json:"rollout,omitempty"`
}

// RegionReplicas returns the replicas in force in the named region: the region's own
// (spec.regions[].replicas) where it sets them, the fleet's elsewhere, with every figure set. A
// field that falls back to the fleet's is moved inside the bounds the region sets itself, so that a
// region setting only max: 2 under a fleet of min 3 runs 2 instances (min 2), and one setting only
// desired: 0 can scale to zero. The fleet must have been defaulted.
func (f *Fleet) RegionReplicas(region string) Replicas {
	fr := f.Spec.Replicas
	fMin, fMax, fDesired := deref32(fr.Min, 1), deref32(fr.Max, 1), deref32(fr.Desired, 1)
	var r Replicas
	for _, rg := range f.Spec.Regions {
		if rg.Name == region && rg.Replicas != nil {
			r = *rg.Replicas
		}
	}
	lo := fMin
	if r.Desired != nil {
		lo = min(lo, *r.Desired)
	}
	if r.Max != nil {
		lo = min(lo, *r.Max)
	}
	hi := fMax
	if r.Min != nil {
		hi = max(hi, *r.Min)
	}
	if r.Desired != nil {
		hi = max(hi, *r.Desired)
	}
	out := Replicas{Min: int32p(lo), Max: int32p(hi)}
	if r.Min != nil {
		out.Min = int32p(*r.Min)
	}
	if r.Max != nil {
		out.Max = int32p(*r.Max)
	}
	d := fDesired
	if r.Desired != nil {
		d = *r.Desired
	} else {
		d = max(min(d, *out.Max), *out.Min)
	}
	out.Desired = int32p(d)
	return out
}

// TotalDesired is the number of instances the fleet should run: the sum of its regions' desired
// counts (each region runs its own group), or spec.replicas.desired for a fleet without regions.
// herd get, describe and the dashboard show ready counts out of it.
func (f *Fleet) TotalDesired() int32 {
	if f.Spec.Replicas.Desired == nil || len(f.Spec.Regions) == 0 {
		return deref32(f.Spec.Replicas.Desired, 0)
	}
	n := int32(0)
	for _, rg := range f.Spec.Regions {
		n += *f.RegionReplicas(rg.Name).Desired
	}
	return n
}

func deref32(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// RegionOrder returns the order in which a rollout's wave visits the fleet's regions:
// spec.rollout.regionOrder, then the regions it leaves out in the order of spec.regions. Names
// that are not regions of the fleet are skipped (validation refuses them).
func (f *Fleet) RegionOrder() []string {
	var order []string
	known := map[string]bool{}
	for _, rg := range f.Spec.Regions {
		known[rg.Name] = true
	}
	for _, name := range f.Spec.Rollout.RegionOrder {
		if known[name] && !slices.Contains(order, name) {
			order = append(order, name)
		}
	}
	for _, rg := range f.Spec.Regions {
		if !slices.Contains(order, rg.Name) {
			order = append(order, rg.Name)
		}
	}
	return order
}

// RegionStatusOf returns the status of the named region, or nil.
func (st *FleetStatus) RegionStatusOf(region string) *RegionStatus {
	for i := range st.Regions {
		if st.Regions[i].Name == region {
			return &st.Regions[i]
		}
	}
	return nil
}

// validateRegions checks what spec.regions[].replicas and spec.rollout.regionOrder say, with
// apimachinery's field errors: every problem names its field and the fix.
func validateRegions(s *FleetSpec) field.ErrorList {
	var errs field.ErrorList
	regions := field.NewPath("spec", "regions")
	names := make([]string, 0, len(s.Regions))
	for _, rg := range s.Regions {
		names = append(names, rg.Name)
	}
	for i, rg := range s.Regions {
		r := rg.Replicas
		if r == nil {
			continue
		}
		p := regions.Index(i).Child("replicas")
		before := len(errs)
		if r.Min != nil && *r.Min < 0 {
			errs = append(errs, field.Invalid(p.Child("min"), *r.Min, "must be >= 0: give 0 to let the region scale to zero"))
		}
		if r.Max != nil && *r.Max < 1 {
			errs = append(errs, field.Invalid(p.Child("max"), *r.Max, "must be >= 1: remove the region from spec.regions to run nothing there"))
		}
		if r.Desired != nil && *r.Desired < 0 {
			errs = append(errs, field.Invalid(p.Child("desired"), *r.Desired, "must be >= 0"))
		}
		if len(errs) > before {
			continue // the comparisons below would only repeat it
		}
		if r.Min != nil && r.Max != nil && *r.Min > *r.Max {
			errs = append(errs, field.Invalid(p.Child("min"), *r.Min, fmt.Sprintf("must be <= %s (%d): lower min or raise max", p.Child("max"), *r.Max)))
			continue
		}
		if r.Desired != nil && r.Min != nil && *r.Desired < *r.Min {
			errs = append(errs, field.Invalid(p.Child("desired"), *r.Desired, fmt.Sprintf("must be >= %s (%d): raise desired or lower min", p.Child("min"), *r.Min)))
		}
		if r.Desired != nil && r.Max != nil && *r.Desired > *r.Max {
			errs = append(errs, field.Invalid(p.Child("desired"), *r.Desired, fmt.Sprintf("must be <= %s (%d): lower desired or raise max", p.Child("max"), *r.Max)))
		}
	}
	order := field.NewPath("spec", "rollout", "regionOrder")
	seen := map[string]int{}
	for i, name := range s.Rollout.RegionOrder {
		p := order.Index(i)
		if j, dup := seen[name]; dup {
			errs = append(errs, field.Invalid(p, name, fmt.Sprintf("duplicates %s: name each region once", order.Index(j))))
			continue
		}
		seen[name] = i
		if !slices.Contains(names, name) {
			errs = append(errs, field.NotSupported(p, name, names))
		}
	}
	return errs
}

// addFieldErrors appends apimachinery's field errors to the API's own list; notSupported says what
// a value outside the supported ones should name instead.
func (l *ErrorList) addFieldErrors(errs field.ErrorList, notSupported string) {
	for _, e := range errs {
		msg := e.ErrorBody()
		if e.Type == field.ErrorTypeNotSupported {
			msg += ": " + notSupported
		}
		*l = append(*l, FieldError{Field: e.Field, Message: strings.TrimSpace(msg)})
	}
}
