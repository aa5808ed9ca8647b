// Package autoscaler decides how many instances a fleet should have from its load, and applies the
// decision. The decision (Strategy) is a pure function of the samples it is fed and the time, so it
// is table-tested without clocks or instances. The loop (Loop) samples every autoscaled fleet on a
// clock, through interfaces it declares: the load balancer's load, the agents' CPU, and a read-only
// view of the instances that the controller offers. It writes only spec.replicas.desired; the
// controller then creates or drains instances as for any change of the count.
//
// The strategy is target tracking, like Kubernetes' HPA and AWS target tracking: the metric per
// instance is kept near a target by setting desired = ceil(current * metric / target). Scale-out
// follows a breach as soon as it has lasted ScaleOutSustain; scale-in only happens when every
// recommendation over the ScaleInStabilization window agrees, so that a short lull does not remove
// capacity that is needed again a minute later. Instances still booting count as capacity already
// on its way, so a breach that lasts while they boot does not add more of them.
package autoscaler

import (
	"fmt"
	"math"
	"time"
)

// Metric is the kind of value fed to the strategy.
type Metric string

// Metrics.
const (
	// RequestsPerSecond: Sample.Value is the fleet's total requests per second; Target is per instance.
	RequestsPerSecond Metric = "requestsPerSecond"
	// CPU: Sample.Value is the average CPU use per ready instance, in percent of a core.
	CPU Metric = "cpu"
	// LatencyP95: Sample.Value is the fleet's p95 latency in milliseconds.
	LatencyP95 Metric = "latencyP95"
)

// Config is a fleet's autoscaling settings.
type Config struct {
	Metric   Metric
	Target   float64
	Min, Max int
	// Tolerance ignores ratios within 1±Tolerance of the target. Default: 0.1.
	Tolerance float64
	// ScaleOutSustain is how long a breach must last before scaling out. Default: 1s.
	ScaleOutSustain time.Duration
	// ScaleInStabilization is how long every recommendation must stay below the current count before
	// scaling in. Default: 300s.
	ScaleInStabilization time.Duration
}

func (c *Config) defaults() {
	if c.Tolerance == 0 {
		c.Tolerance = 0.1
	}
	if c.ScaleOutSustain == 0 {
		c.ScaleOutSustain = time.Second
	}
	if c.ScaleInStabilization == 0 {
		c.ScaleInStabilization = 300 * time.Second
	}
}

// Sample is one observation of a fleet.
type Sample struct {
	Time time.Time
	// Value is the metric, as described on Metric.
	Value float64
	// Desired is the fleet's current desired count.
	Desired int
	// Ready counts instances serving; Booting counts instances on their way.
	Ready, Booting int
	// Queued counts requests the load balancer holds because no instance serves (scale from zero).
	Queued int
}

// Decision is what the strategy recommends.
type Decision struct {
	// Desired is the count to set; equal to the sample's Desired when nothing changes.
	Desired int
	// Reason says why, for events and logs.
	Reason string
}

type recommendation struct {
	at      time.Time
	desired int
}

// Strategy is one fleet's autoscaler. It keeps the recent recommendations it needs for
// sustain and stabilization; it is not safe for concurrent use.
type Strategy struct {
	cfg         Config
	recent      []recommendation
	breachSince time.Time
	started     time.Time // first sample: scale-in waits for a whole window after it
}

// New returns a strategy for cfg.
func New(cfg Config) *Strategy {
	cfg.defaults()
	return &Strategy{cfg: cfg}
}

// SetConfig changes the settings (the fleet spec changed) and keeps the history.
func (s *Strategy) SetConfig(cfg Config) {
	cfg.defaults()
	s.cfg = cfg
}

// raw is the unstabilised recommendation for one sample.
func (s *Strategy) raw(in Sample) int {
	c := s.cfg
	switch c.Metric {
	case RequestsPerSecond:
		// Total load divided by what one instance should carry.
		if in.Value <= 0 {
			return 0
		}
		ratio := in.Value / (c.Target * float64(max(in.Ready, 1)))
		if in.Ready > 0 && math.Abs(ratio-1) <= c.Tolerance {
			return in.Ready
		}
		return int(math.Ceil(in.Value / c.Target))
	default:
		// CPU and latency are per-instance figures: scale the serving count by their ratio.
		if in.Ready == 0 {
			return in.Desired
		}
		ratio := in.Value / c.Target
		if math.Abs(ratio-1) <= c.Tolerance {
			return in.Ready
		}
		return int(math.Ceil(float64(in.Ready) * ratio))
	}
}

// Decide returns the recommendation for a new sample.
func (s *Strategy) Decide(in Sample) Decision {
	c := s.cfg
	clamp := func(n int) int { return min(max(n, c.Min), c.Max) }
	want := clamp(s.raw(in))
	if in.Queued > 0 {
		// Held requests are demand that no instance serves yet: never plan fewer than one for them.
		want = clamp(max(want, 1))
		if in.Desired == 0 {
			// Requests wait for a first instance: boot one now, whatever the history says.
			s.recent = nil
			s.breachSince = time.Time{}
			return Decision{Desired: want, Reason: fmt.Sprintf("%d requests waiting and no instance: scaling from zero", in.Queued)}
		}
	}

	if s.started.IsZero() {
		s.started = in.Time
	}
	s.recent = append(s.recent, recommendation{at: in.Time, desired: want})
	cut := 0
	for cut < len(s.recent) && in.Time.Sub(s.recent[cut].at) > c.ScaleInStabilization {
		cut++
	}
	s.recent = s.recent[cut:]

	switch {
	case want > in.Desired:
		// A breach: the load needs more than is set. Desired already counts booting instances, so
		// a breach that lasts while they boot asks for no more than the load needs.
		if s.breachSince.IsZero() {
			s.breachSince = in.Time
		}
		if in.Time.Sub(s.breachSince) < c.ScaleOutSustain {
			return Decision{Desired: in.Desired, Reason: "breach not sustained yet"}
		}
		return Decision{Desired: want, Reason: fmt.Sprintf("%s %.1f against target %.1f per instance: scaling out from %d to %d", c.Metric, in.Value, c.Target, in.Desired, want)}
	case want < in.Desired:
		s.breachSince = time.Time{}
		// Scale in only as far as the highest recommendation over the whole window allows, and
		// never before a whole window of samples has been seen.
		if in.Time.Sub(s.started) < c.ScaleInStabilization {
			return Decision{Desired: in.Desired, Reason: "stabilizing before scaling in"}
		}
		highest := 0
		for _, r := range s.recent {
			highest = max(highest, r.desired)
		}
		if highest >= in.Desired {
			return Decision{Desired: in.Desired, Reason: "load was higher within the stabilization window"}
		}
		return Decision{Desired: highest, Reason: fmt.Sprintf("%s %.1f against target %.1f for %s: scaling in from %d to %d", c.Metric, in.Value, c.Target, c.ScaleInStabilization, in.Desired, highest)}
	default:
		s.breachSince = time.Time{}
		return Decision{Desired: in.Desired, Reason: "on target"}
	}
}
