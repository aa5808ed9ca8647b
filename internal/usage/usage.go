// Package usage computes what `herd top` shows without a Prometheus: each instance's and fleet's
// CPU and memory, from herd up's scrapes of the agents, and requests per second, p95 latency and
// 5xx per second, from the load balancer's cumulative counters sampled every few seconds and
// subtracted over a short window (as metrics-server does for kubectl top).
package usage

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agentmetrics"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/lb"
)

// Counters is what is read of the load balancer; *lb.LB has it.
type Counters interface {
	Metrics() lb.Snapshot
}

// Nodes gives the instances' CPU and memory; *agentmetrics.Scraper has it.
type Nodes interface {
	Usage() []agentmetrics.Usage
}

// Options configure a Sampler.
type Options struct {
	// LB is the load balancer whose counters are sampled. Required.
	LB Counters
	// Nodes gives the instances' CPU and memory. Default: none known.
	Nodes Nodes
	// Every is the time between samples. Default: 5s.
	Every time.Duration
	// Window is the span rates are computed over. Default: 10s.
	Window time.Duration
	// Now is the clock, for tests. Default: time.Now.
	Now func() time.Time
}

// Sampler samples the load balancer's counters and reports usage from them.
type Sampler struct {
	opts Options

	mu      sync.Mutex
	samples []sample // oldest first; the oldest is the window's baseline
}

// sample is the load balancer's counters at one time, per fleet and per instance (summed over
// the fleet's listeners).
type sample struct {
	at        time.Time
	fleets    map[string]lb.Stats
	instances map[string]lb.Stats
}

// New checks opts and fills in the defaults.
func New(opts Options) (*Sampler, error) {
	switch {
	case opts.LB == nil:
		return nil, errors.New("usage: LB is required")
	case opts.Every < 0 || opts.Window < 0:
		return nil, errors.New("usage: Every and Window must not be negative")
	}
	if opts.Every == 0 {
		opts.Every = 5 * time.Second
	}
	if opts.Window == 0 {
		opts.Window = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Sampler{opts: opts}, nil
}

// Start samples every Every, the first at once, until ctx ends; it returns nil then.
func (s *Sampler) Start(ctx context.Context) error {
	tick := time.NewTicker(s.opts.Every)
	defer tick.Stop()
	for {
		s.Sample()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Sample reads the load balancer's counters once and drops the samples the window no longer needs.
func (s *Sampler) Sample() {
	snap := s.opts.LB.Metrics()
	smp := sample{at: s.opts.Now(), fleets: map[string]lb.Stats{}, instances: map[string]lb.Stats{}}
	for _, f := range snap.Fleets {
		smp.fleets[f.Fleet] = f.Stats
		for _, g := range f.Groups {
			for _, t := range g.Targets {
				smp.instances[t.ID] = smp.instances[t.ID].Add(t.Stats)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples = append(s.samples, smp)
	// Keep the newest sample at or before the window's start as the baseline, and the newer ones.
	from := smp.at.Add(-s.opts.Window)
	drop := 0
	for drop+1 < len(s.samples) && !s.samples[drop+1].at.After(from) {
		drop++
	}
	s.samples = append(s.samples[:0:0], s.samples[drop:]...)
}

// Report gives the figures of instances and of their fleets, sorted by name.
func (s *Sampler) Report(instances []*v1alpha1.Instance) apiserver.UsageReport {
	nodes := map[string]agentmetrics.Usage{}
	if s.opts.Nodes != nil {
		for _, u := range s.opts.Nodes.Usage() {
			nodes[u.Instance] = u
		}
	}
	s.mu.Lock()
	var first, last sample
	if n := len(s.samples); n >= 2 {
		first, last = s.samples[0], s.samples[n-1]
	}
	s.mu.Unlock()
	elapsed := last.at.Sub(first.at).Seconds()

	report := apiserver.UsageReport{WindowSeconds: elapsed, Fleets: []apiserver.FleetUsage{}, Instances: []apiserver.InstanceUsage{}}
	fleets := map[string]*apiserver.FleetUsage{}
	for _, in := range instances {
		iu := apiserver.InstanceUsage{Fleet: in.Spec.Fleet, Region: in.Spec.Region, Revision: in.Spec.Revision,
			Instance: in.Metadata.Name, Phase: in.Status.Phase}
		if cur, ok := last.instances[in.Metadata.Name]; ok && elapsed > 0 {
			iu.Usage = rates(cur, first.instances[in.Metadata.Name], elapsed)
		}
		node := nodes[in.Metadata.Name]
		iu.CPUCores, iu.MemoryBytes = node.CPUCores, node.MemoryBytes
		report.Instances = append(report.Instances, iu)

		fu := fleets[in.Spec.Fleet]
		if fu == nil {
			fu = &apiserver.FleetUsage{Fleet: in.Spec.Fleet}
			if cur, ok := last.fleets[in.Spec.Fleet]; ok && elapsed > 0 {
				fu.Usage = rates(cur, first.fleets[in.Spec.Fleet], elapsed)
			}
			fleets[in.Spec.Fleet] = fu
		}
		fu.Instances++
		fu.CPUCores = addKnown(fu.CPUCores, iu.CPUCores)
		fu.MemoryBytes = addKnown(fu.MemoryBytes, iu.MemoryBytes)
	}
	for _, fu := range fleets {
		report.Fleets = append(report.Fleets, *fu)
	}
	sort.Slice(report.Fleets, func(i, j int) bool { return report.Fleets[i].Fleet < report.Fleets[j].Fleet })
	sort.Slice(report.Instances, func(i, j int) bool {
		a, b := report.Instances[i], report.Instances[j]
		if a.Fleet != b.Fleet {
			return a.Fleet < b.Fleet
		}
		return a.Instance < b.Instance
	})
	return report
}

// rates turns two readings of cumulative counters into the window's figures. A baseline above
// the reading means the counters started over (the target was removed and added again): the
// reading is all the window's then. The p95 is unknown when no request finished.
func rates(cur, prev lb.Stats, seconds float64) apiserver.Usage {
	if prev.Total() > cur.Total() {
		prev = lb.Stats{}
	}
	d := cur.Sub(prev)
	rps := float64(d.Total()) / seconds
	errs := float64(d.Requests[lb.Class5xx]+d.Requests[lb.ClassFailed]) / seconds
	u := apiserver.Usage{RequestsPerSecond: &rps, Errors5xxPerSecond: &errs}
	if d.Total() > 0 {
		p95 := d.Quantile(0.95).Seconds()
		u.LatencyP95Seconds = &p95
	}
	return u
}

// addKnown adds v to sum, where nil is unknown: a sum is known once one of its terms is.
func addKnown(sum, v *float64) *float64 {
	switch {
	case v == nil:
		return sum
	case sum == nil:
		x := *v
		return &x
	}
	x := *sum + *v
	return &x
}

// GroupUsage is the load balancer's figures for a fleet's instances of one revision in one region,
// what the dashboard charts while a rollout moves traffic between revisions.
type GroupUsage struct {
	Revision string `json:"revision"`
	Region   string `json:"region"`
	apiserver.Usage
}

// Groups sums the load balancer's counters of instances per revision and region and gives their
// rates over the newest span of at least window between two samples (or the longest span there is),
// sorted by revision and region. Nil while there are fewer than two samples. An instance whose
// counters started over within the span counts from zero, so one re-added target does not make its
// group's rates negative.
func (s *Sampler) Groups(instances []*v1alpha1.Instance, window time.Duration) []GroupUsage {
	s.mu.Lock()
	n := len(s.samples)
	if n < 2 {
		s.mu.Unlock()
		return nil
	}
	last := s.samples[n-1]
	i := n - 2
	for i > 0 && last.at.Sub(s.samples[i].at) < window {
		i--
	}
	first := s.samples[i] // samples are never modified once taken: safe to read unlocked
	s.mu.Unlock()
	elapsed := last.at.Sub(first.at).Seconds()
	if elapsed <= 0 {
		return nil
	}

	type key struct{ revision, region string }
	cur, prev := map[key]lb.Stats{}, map[key]lb.Stats{}
	for _, in := range instances {
		k := key{in.Spec.Revision, in.Spec.Region}
		c, ok := last.instances[in.Metadata.Name]
		if !ok {
			continue
		}
		p := first.instances[in.Metadata.Name]
		if p.Total() > c.Total() {
			p = lb.Stats{}
		}
		cur[k], prev[k] = cur[k].Add(c), prev[k].Add(p)
	}
	out := make([]GroupUsage, 0, len(cur))
	for k, c := range cur {
		out = append(out, GroupUsage{Revision: k.revision, Region: k.region, Usage: rates(c, prev[k], elapsed)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Revision != out[j].Revision {
			return out[i].Revision < out[j].Revision
		}
		return out[i].Region < out[j].Region
	})
	return out
}
