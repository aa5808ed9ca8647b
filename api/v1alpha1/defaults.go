package v1alpha1

import (
	"fmt"
	"time"
)

// Defaults applied to a Fleet. They are documented on the fields in fleet.go; keep the two in step.
const (
	DefaultRegionName          = "local"
	DefaultHealthPath          = "/healthz"
	DefaultHealthInterval      = time.Second
	DefaultHealthTimeout       = 500 * time.Millisecond
	DefaultHealthyThreshold    = 2
	DefaultUnhealthyThreshold  = 2
	DefaultHealthGracePeriod   = 60 * time.Second
	DefaultScaleInStabilizaton = 300 * time.Second
	DefaultRollbackWindow      = 300 * time.Second
	DefaultCanaryPause         = 60 * time.Second
)

func int32p(v int32) *int32 { return &v }

func durp(d time.Duration) *Duration { return &Duration{d} }

// SetFleetDefaults fills every unset field of f with its documented default. defaultProvider is the
// provider regions without one use (the control plane's own).
func SetFleetDefaults(f *Fleet, defaultProvider string) {
	s := &f.Spec
	r := &s.Replicas
	if r.Min == nil {
		if r.Desired != nil && *r.Desired < 1 {
			r.Min = int32p(*r.Desired)
		} else {
			r.Min = int32p(1)
		}
	}
	if r.Desired == nil {
		r.Desired = int32p(*r.Min)
	}
	if r.Max == nil {
		r.Max = int32p(max(*r.Min, *r.Desired, 1))
	}
	for i := range s.Listeners {
		l := &s.Listeners[i]
		if l.Protocol == "" {
			l.Protocol = ProtocolHTTP
		}
		if l.Name == "" {
			l.Name = fmt.Sprintf("%s-%d", l.Protocol, l.Port)
		}
	}
	h := &s.HealthCheck
	if h.Path == "" {
		h.Path = DefaultHealthPath
	}
	if h.Port == 0 && len(s.Listeners) > 0 {
		h.Port = s.Listeners[0].InstancePort
	}
	if h.Interval == nil {
		h.Interval = durp(DefaultHealthInterval)
	}
	if h.Timeout == nil {
		h.Timeout = durp(min(DefaultHealthTimeout, h.Interval.Duration))
	}
	if h.HealthyThreshold == 0 {
		h.HealthyThreshold = DefaultHealthyThreshold
	}
	if h.UnhealthyThreshold == 0 {
		h.UnhealthyThreshold = DefaultUnhealthyThreshold
	}
	if h.GracePeriod == nil {
		h.GracePeriod = durp(DefaultHealthGracePeriod)
	}
	if a := s.Autoscaling; a != nil {
		if a.Metric == "" {
			a.Metric = MetricRequestsPerSecond
		}
		if a.ScaleInStabilization == nil {
			a.ScaleInStabilization = durp(DefaultScaleInStabilizaton)
		}
	}
	ro := &s.Rollout
	if ro.Strategy == "" {
		ro.Strategy = StrategyRolling
	}
	if ro.MaxSurge == nil {
		ro.MaxSurge = int32p(1)
	}
	if ro.MaxUnavailable == nil {
		ro.MaxUnavailable = int32p(0)
	}
	if ro.RollbackWindow == nil {
		ro.RollbackWindow = durp(DefaultRollbackWindow)
	}
	if ro.Strategy == StrategyCanary {
		if len(ro.Steps) == 0 {
			ro.Steps = []CanaryStep{{Weight: 10}, {Weight: 50}}
		}
		for i := range ro.Steps {
			if ro.Steps[i].Pause == nil {
				ro.Steps[i].Pause = durp(DefaultCanaryPause)
			}
		}
		if ro.Analysis == nil {
			ro.Analysis = &CanaryAnalysis{}
		}
	}
	if a := ro.Analysis; a != nil {
		if a.MaxErrorRateRatio == 0 {
			a.MaxErrorRateRatio = 2
		}
		if a.MaxLatencyRatio == 0 {
			a.MaxLatencyRatio = 1.5
		}
		if a.MinRequests == 0 {
			a.MinRequests = 100
		}
	}
	if len(s.Regions) == 0 {
		s.Regions = []Region{{Name: DefaultRegionName}}
	}
	hasDefault := false
	for i := range s.Regions {
		if s.Regions[i].Provider == "" {
			s.Regions[i].Provider = defaultProvider
		}
		hasDefault = hasDefault || s.Regions[i].Default
	}
	if !hasDefault {
		s.Regions[0].Default = true
	}
	setGlobalDefaults(s)
	setTenancyDefaults(s)
	setDiscoveryDefaults(f)
}

// DefaultRegion returns the region new instances go to. The fleet must have been defaulted.
func (f *Fleet) DefaultRegion() Region {
	for _, r := range f.Spec.Regions {
		if r.Default {
			return r
		}
	}
	if len(f.Spec.Regions) > 0 {
		return f.Spec.Regions[0]
	}
	return Region{Name: DefaultRegionName}
}

// SetNodeImageDefaults fills every unset field of n with its documented default.
func SetNodeImageDefaults(n *NodeImage, pinnedVersion string) {
	if n.Spec.Kubernetes.Distribution == "" {
		n.Spec.Kubernetes.Distribution = "upstream"
	}
	if n.Spec.Kubernetes.Version == "" {
		n.Spec.Kubernetes.Version = pinnedVersion
	}
	for _, sw := range []**bool{&n.Spec.Addons.DNS, &n.Spec.Addons.Storage, &n.Spec.Addons.Metrics} {
		if *sw == nil {
			on := true
			*sw = &on
		}
	}
	for i := range n.Spec.Charts {
		if n.Spec.Charts[i].Namespace == "" {
			n.Spec.Charts[i].Namespace = "default"
		}
	}
}
