package autoscaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/utils/clock"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// LoadSource reports a fleet's load as the load balancer sees it; internal/lbsync implements it
// on top of the load balancer's counters.
type LoadSource interface {
	// FleetLoad returns the fleet's load over about the last window; ok is false while there are
	// no figures for the fleet yet (no listener, or not two samples apart).
	FleetLoad(fleet string, window time.Duration) (load Load, ok bool)
}

// Load is a fleet's traffic over a short window.
type Load struct {
	// RequestsPerSecond counts every finished request of the fleet, whatever its answer.
	RequestsPerSecond float64
	// LatencyP95 is the 95th percentile of the requests' latency.
	LatencyP95 time.Duration
	// Queued counts requests the load balancer holds right now because no instance serves.
	Queued int
}

// CPUSource reports the CPU use of a fleet's instances as their agents measure it;
// internal/agentmetrics implements it by scraping the agents of the serving instances.
type CPUSource interface {
	// FleetCPU returns the fleet's average CPU use per instance, in percent of one core, and how
	// many instances are behind the figure; ok is false while there is no figure.
	FleetCPU(fleet string) (percent float64, instances int, ok bool)
}

// InstanceView is the read-only view of a fleet's instances the loop needs; the controller, which
// owns the instance records, offers it. Warm-pool instances are out of rotation and in neither
// figure.
type InstanceView interface {
	// InstanceCounts returns how many of a fleet's instances serve and how many are on their way.
	InstanceCounts(fleet string) (ready, booting int)
}

// EventRecorder records events about objects; internal/events implements it.
type EventRecorder interface {
	Eventf(object, typ, reason, format string, args ...any)
}

// Event reasons of autoscaling.
const (
	ReasonScaledOut = "ScaledOut"
	ReasonScaledIn  = "ScaledIn"
)

// LoopOptions configure the autoscaling loop.
type LoopOptions struct {
	// Store holds the fleets. Required.
	Store store.Store
	// Instances is the view of the fleets' instances. Required.
	Instances InstanceView
	// Events records each change of a fleet's desired count. Required.
	Events EventRecorder
	// Load is where the fleets' load comes from. Required.
	Load LoadSource
	// CPU is where the fleets' CPU use comes from; fleets autoscaled on cpu are left alone
	// without it.
	CPU CPUSource
	// Interval is how often every autoscaled fleet is sampled. Default: 500ms.
	Interval time.Duration
	// Window is the span the load is measured over. Default: 1s.
	Window time.Duration
	// ScaleOutSustain is how long a breach must last before scaling out. Default: half the
	// interval, that is two consecutive samples: each already averages the load over Window, so a
	// breach is acted on once it has been seen for more than Window.
	ScaleOutSustain time.Duration
	// Clock times the samples and the interval. Default: the real clock.
	Clock clock.WithTicker
	// Logger. Default: discard.
	Logger *slog.Logger
	// Observer, when set, sees every decision's inputs and outcome, and each fleet that stops
	// being autoscaled. herd up exports them in /metrics.
	Observer Observer
}

// Observer sees the autoscaler's work.
type Observer interface {
	// Decided is called for each sample of an autoscaled fleet, with the strategy's decision.
	Decided(fleet string, cfg Config, s Sample, d Decision)
	// Forgotten is called when a fleet is no longer autoscaled (changed or deleted).
	Forgotten(fleet string)
}

// Loop applies the strategy's decisions to fleets with spec.autoscaling: every interval it samples
// each fleet's load, feeds the fleet's strategy and, when the decision differs from
// spec.replicas.desired, writes the new count to the fleet and records an event. The controller
// then creates or drains instances as for any change of desired. Run it with Start.
type Loop struct {
	opts LoopOptions
	log  *slog.Logger
	// strategies are keyed by fleet, or by "fleet/region" for a fleet autoscaled per region.
	strategies map[string]*Strategy
	skipped    map[string]string // fleet -> metric whose lack was already logged
	// byRegionSeen marks the fleets the last pass autoscaled per region.
	byRegionSeen map[string]bool
}

// NewLoop checks the options and returns a loop that is not yet running.
func NewLoop(opts LoopOptions) (*Loop, error) {
	switch {
	case opts.Store == nil:
		return nil, errors.New("autoscaler: a store is required")
	case opts.Instances == nil:
		return nil, errors.New("autoscaler: an instance view is required")
	case opts.Events == nil:
		return nil, errors.New("autoscaler: an event recorder is required")
	case opts.Load == nil:
		return nil, errors.New("autoscaler: a load source is required")
	}
	if opts.Interval <= 0 {
		opts.Interval = 500 * time.Millisecond
	}
	if opts.Window <= 0 {
		opts.Window = time.Second
	}
	if opts.ScaleOutSustain <= 0 {
		opts.ScaleOutSustain = opts.Interval / 2
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Loop{
		opts: opts, log: opts.Logger.With("component", "autoscaler"),
		strategies: map[string]*Strategy{}, skipped: map[string]string{}, byRegionSeen: map[string]bool{},
	}, nil
}

// Start samples and decides until ctx ends. It returns nil on a clean stop.
func (l *Loop) Start(ctx context.Context) error {
	l.log.Info("autoscaler started", "interval", l.opts.Interval.String(), "window", l.opts.Window.String(), "scale_out_sustain", l.opts.ScaleOutSustain.String())
	t := l.opts.Clock.NewTicker(l.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := l.tick(ctx); err != nil && ctx.Err() == nil {
				l.log.Warn("autoscaling pass failed", "err", err)
			}
		}
	}
}

func configOf(f *v1alpha1.Fleet, sustain time.Duration) Config {
	as := f.Spec.Autoscaling
	cfg := Config{
		Metric: Metric(as.Metric), Target: as.Target,
		Min: int(*f.Spec.Replicas.Min), Max: int(*f.Spec.Replicas.Max),
		ScaleOutSustain: sustain,
	}
	if as.ScaleInStabilization != nil {
		cfg.ScaleInStabilization = as.ScaleInStabilization.Duration
		if cfg.ScaleInStabilization == 0 {
			cfg.ScaleInStabilization = time.Nanosecond // 0 means "no window", not "the default"
		}
	}
	return cfg
}

// tick samples every autoscaled fleet once.
func (l *Loop) tick(ctx context.Context) error {
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, l.opts.Store, store.Fleets)
	if err != nil {
		return fmt.Errorf("list fleets: %w", err)
	}
	seen := map[string]bool{}
	var errs []error
	for _, f := range fleets {
		if f.Spec.Autoscaling == nil {
			continue
		}
		v1alpha1.SetFleetDefaults(f, "")
		name := f.Metadata.Name
		seen[name] = true
		cfg := configOf(f, l.opts.ScaleOutSustain)
		if cfg.Metric == CPU {
			if l.opts.CPU == nil {
				if l.skipped[name] != string(cfg.Metric) {
					l.skipped[name] = string(cfg.Metric)
					l.log.Warn("fleet autoscales on cpu, but this control plane reads no cpu figures: not autoscaling it", "fleet", name)
				}
				continue
			}
		}
		delete(l.skipped, name)
		if l.byRegion(f) {
			errs = append(errs, l.tickRegions(ctx, f, cfg)...)
			continue
		}
		st := l.strategyFor(name, cfg)
		sample, ok := l.sample(name, cfg.Metric)
		if !ok {
			continue
		}
		sample.Desired = int(*f.Spec.Replicas.Desired)
		d := st.Decide(sample)
		if l.opts.Observer != nil {
			l.opts.Observer.Decided(name, cfg, sample, d)
		}
		if d.Desired == sample.Desired {
			continue
		}
		if err := l.setDesired(ctx, name, int32(d.Desired)); err != nil {
			errs = append(errs, err)
			continue
		}
		reason := ReasonScaledOut
		if d.Desired < sample.Desired {
			reason = ReasonScaledIn
		}
		l.opts.Events.Eventf("Fleet/"+name, v1alpha1.EventNormal, reason, "%s", d.Reason)
	}
	for key := range l.strategies {
		name, region, _ := strings.Cut(key, "/")
		if !seen[name] || (region != "" && !l.byRegionSeen[name]) || (region == "" && l.byRegionSeen[name]) {
			delete(l.strategies, key)
		}
		if !seen[name] && region == "" {
			if l.opts.Observer != nil {
				l.opts.Observer.Forgotten(name)
			}
		}
	}
	return errors.Join(errs...)
}

// strategyFor returns the strategy kept under key (a fleet, or "fleet/region"), made or updated
// for cfg.
func (l *Loop) strategyFor(key string, cfg Config) *Strategy {
	st := l.strategies[key]
	if st == nil {
		st = New(cfg)
		l.strategies[key] = st
	} else {
		st.SetConfig(cfg)
	}
	return st
}

// sample observes one fleet for its metric; ok is false while there is no figure to act on.
func (l *Loop) sample(fleet string, metric Metric) (s Sample, ok bool) {
	load, loadOK := l.opts.Load.FleetLoad(fleet, l.opts.Window)
	ready, booting := l.opts.Instances.InstanceCounts(fleet)
	return l.sampleOf(fleet, metric, load, loadOK, ready, booting)
}

// sampleOf makes a sample of the metric from what was observed of a fleet or one of its regions.
// CPU is the fleet's average per instance, which does not depend on how many instances a region
// has (the agents' figures are not counted by region).
func (l *Loop) sampleOf(fleet string, metric Metric, load Load, loadOK bool, ready, booting int) (s Sample, ok bool) {
	s = Sample{Time: l.opts.Clock.Now(), Ready: ready, Booting: booting, Queued: load.Queued}
	switch metric {
	case CPU:
		// The load balancer's figures still count for requests held at zero instances, when
		// there is no instance to measure.
		cpu, _, cpuOK := l.opts.CPU.FleetCPU(fleet)
		s.Value = cpu
		return s, cpuOK || load.Queued > 0
	case LatencyP95:
		s.Value = float64(load.LatencyP95) / float64(time.Millisecond)
	default:
		s.Value = load.RequestsPerSecond
	}
	return s, loadOK
}

// setDesired writes spec.replicas.desired through store.UpdateFleetSpec (read-modify-write on
// the fleet's resource version, retried on conflicts; the generation follows the spec there). The count is clamped to the fleet's current min and max. It is the loop's
// only write.
func (l *Loop) setDesired(ctx context.Context, name string, desired int32) error {
	d, written := desired, false
	_, err := store.UpdateFleetSpec(ctx, l.opts.Store, name, func(f *v1alpha1.Fleet) error {
		written = false
		if f.Spec.Autoscaling == nil {
			return nil // autoscaling was switched off meanwhile
		}
		rp := f.Spec.Replicas
		d = desired
		if rp.Min != nil {
			d = max(d, *rp.Min)
		}
		if rp.Max != nil {
			d = min(d, *rp.Max)
		}
		written = rp.Desired == nil || *rp.Desired != d
		f.Spec.Replicas.Desired = new(d)
		return nil
	})
	if err != nil {
		return fmt.Errorf("set desired of fleet %s to %d: %w", name, d, err)
	}
	if written {
		l.log.Info("fleet autoscaled", "fleet", name, "desired", d)
	}
	return nil
}
