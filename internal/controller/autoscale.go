package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/store"
)

// LoadSource reports a fleet's load as the load balancer sees it. The controller declares it;
// internal/lbsync implements it on top of the load balancer's counters.
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

// CPUSource reports the CPU use of a fleet's instances as their agents measure it. The controller
// declares it; internal/agentmetrics implements it by scraping the agents of CPUTargets.
type CPUSource interface {
	// FleetCPU returns the fleet's average CPU use per instance, in percent of one core, and how
	// many instances are behind the figure; ok is false while there is no figure.
	FleetCPU(fleet string) (percent float64, instances int, ok bool)
}

// ScrapeTarget is a serving instance whose agent a CPUSource reads.
type ScrapeTarget struct {
	Fleet, Instance, Address string
}

// Event reasons of autoscaling.
const (
	ReasonScaledOut = "ScaledOut"
	ReasonScaledIn  = "ScaledIn"
)

// AutoscalerOptions configure the autoscaling loop.
type AutoscalerOptions struct {
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
	// Logger; the controller's when nil.
	Logger *slog.Logger
}

// Autoscaler applies the autoscaler's decisions to fleets with spec.autoscaling: every interval
// it samples each fleet's load, feeds the fleet's strategy and, when the decision differs from
// spec.replicas.desired, writes the new count to the fleet and records an event. The controller
// then creates or drains instances as for any change of desired. Run it with Start.
type Autoscaler struct {
	c          *Controller
	opts       AutoscalerOptions
	log        *slog.Logger
	strategies map[string]*autoscaler.Strategy
	skipped    map[string]string // fleet -> metric whose lack was already logged
	now        func() time.Time

	mu        sync.Mutex
	cpuFleets []string // fleets autoscaled on cpu, as of the last pass
}

// NewAutoscaler returns the autoscaling loop of c.
func (c *Controller) NewAutoscaler(opts AutoscalerOptions) (*Autoscaler, error) {
	if opts.Load == nil {
		return nil, errors.New("autoscaler: a load source is required")
	}
	orDefault(&opts.Interval, 500*time.Millisecond)
	orDefault(&opts.Window, time.Second)
	orDefault(&opts.ScaleOutSustain, opts.Interval/2)
	log := opts.Logger
	if log == nil {
		log = c.opts.Logger
	}
	return &Autoscaler{
		c: c, opts: opts, log: log.With("component", "autoscaler"),
		strategies: map[string]*autoscaler.Strategy{}, skipped: map[string]string{}, now: time.Now,
	}, nil
}

// Start samples and decides until ctx ends. It returns nil on a clean stop.
func (a *Autoscaler) Start(ctx context.Context) error {
	a.log.Info("autoscaler started", "interval", a.opts.Interval.String(), "window", a.opts.Window.String(), "scale_out_sustain", a.opts.ScaleOutSustain.String())
	t := time.NewTicker(a.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := a.tick(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("autoscaling pass failed", "err", err)
			}
		}
	}
}

func configOf(f *v1alpha1.Fleet, sustain time.Duration) autoscaler.Config {
	as := f.Spec.Autoscaling
	cfg := autoscaler.Config{
		Metric: autoscaler.Metric(as.Metric), Target: as.Target,
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
func (a *Autoscaler) tick(ctx context.Context) error {
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, a.c.opts.Store, store.Fleets)
	if err != nil {
		return fmt.Errorf("list fleets: %w", err)
	}
	seen := map[string]bool{}
	var errs []error
	var cpuFleets []string
	defer func() {
		a.mu.Lock()
		a.cpuFleets = cpuFleets
		a.mu.Unlock()
	}()
	for _, f := range fleets {
		if f.Spec.Autoscaling == nil {
			continue
		}
		v1alpha1.SetFleetDefaults(f, "")
		name := f.Metadata.Name
		seen[name] = true
		cfg := configOf(f, a.opts.ScaleOutSustain)
		if cfg.Metric == autoscaler.CPU {
			if a.opts.CPU == nil {
				if a.skipped[name] != string(cfg.Metric) {
					a.skipped[name] = string(cfg.Metric)
					a.log.Warn("fleet autoscales on cpu, but this control plane reads no cpu figures: not autoscaling it", "fleet", name)
				}
				continue
			}
			cpuFleets = append(cpuFleets, name)
		}
		delete(a.skipped, name)
		st := a.strategies[name]
		if st == nil {
			st = autoscaler.New(cfg)
			a.strategies[name] = st
		} else {
			st.SetConfig(cfg)
		}
		load, ok := a.opts.Load.FleetLoad(name, a.opts.Window)
		ready, booting := a.c.instanceCounts(name)
		sample := autoscaler.Sample{Time: a.now(), Desired: int(*f.Spec.Replicas.Desired), Ready: ready, Booting: booting, Queued: load.Queued}
		switch cfg.Metric {
		case autoscaler.CPU:
			// The load balancer's figures still count for requests held at zero instances, when
			// there is no instance to measure.
			cpu, _, cpuOK := a.opts.CPU.FleetCPU(name)
			if !cpuOK && load.Queued == 0 {
				continue
			}
			sample.Value = cpu
		case autoscaler.LatencyP95:
			if !ok {
				continue
			}
			sample.Value = float64(load.LatencyP95) / float64(time.Millisecond)
		default:
			if !ok {
				continue
			}
			sample.Value = load.RequestsPerSecond
		}
		d := st.Decide(sample)
		if d.Desired == sample.Desired {
			continue
		}
		if err := a.setDesired(ctx, name, int32(d.Desired)); err != nil {
			errs = append(errs, err)
			continue
		}
		reason := ReasonScaledOut
		if d.Desired < sample.Desired {
			reason = ReasonScaledIn
		}
		a.c.events.Eventf("Fleet/"+name, v1alpha1.EventNormal, reason, "%s", d.Reason)
	}
	for name := range a.strategies {
		if !seen[name] {
			delete(a.strategies, name)
		}
	}
	return errors.Join(errs...)
}

// setDesired writes spec.replicas.desired, read-modify-write on the fleet's resource version,
// retried on conflicts. The count is clamped to the fleet's current min and max.
func (a *Autoscaler) setDesired(ctx context.Context, name string, desired int32) error {
	d, written := desired, false
	_, err := store.UpdateObject(ctx, a.c.opts.Store, store.Fleets, name, func(f *v1alpha1.Fleet) (bool, error) {
		written = false
		if f.Spec.Autoscaling == nil {
			return false, nil // autoscaling was switched off meanwhile
		}
		rp := f.Spec.Replicas
		d = desired
		if rp.Min != nil {
			d = max(d, *rp.Min)
		}
		if rp.Max != nil {
			d = min(d, *rp.Max)
		}
		if rp.Desired != nil && *rp.Desired == d {
			return false, nil
		}
		f.Spec.Replicas.Desired = new(d)
		f.Metadata.Generation++
		written = true
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("set desired of fleet %s to %d: %w", name, d, err)
	}
	if written {
		a.log.Info("fleet autoscaled", "fleet", name, "desired", d)
	}
	return nil
}

// CPUTargets returns the serving instances of the fleets autoscaled on cpu: those whose agents a
// CPUSource should read.
func (a *Autoscaler) CPUTargets() []ScrapeTarget {
	a.mu.Lock()
	fleets := a.cpuFleets
	a.mu.Unlock()
	var out []ScrapeTarget
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	for _, fleet := range fleets {
		for _, in := range a.c.instances[fleet] {
			if IsWarm(in) || in.Status.Phase != v1alpha1.PhaseReady || in.Status.Address == "" {
				continue
			}
			out = append(out, ScrapeTarget{Fleet: fleet, Instance: in.Metadata.Name, Address: in.Status.Address})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Instance < out[j].Instance })
	return out
}

// instanceCounts returns how many of a fleet's instances serve and how many are on their way.
func (c *Controller) instanceCounts(fleet string) (ready, booting int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, in := range c.instances[fleet] {
		if IsWarm(in) {
			continue // out of rotation: neither serving nor coming capacity until taken
		}
		switch in.Status.Phase {
		case v1alpha1.PhaseReady:
			ready++
		case v1alpha1.PhasePending, v1alpha1.PhaseBooting:
			booting++
		}
	}
	return ready, booting
}
