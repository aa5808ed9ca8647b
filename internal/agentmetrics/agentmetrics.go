// Package agentmetrics scrapes the herd agents' /metrics endpoints of every serving instance, for
// two readers: the autoscaler, which scales a fleet on CPU, and herd up's own /metrics, which
// serves each instance's node figures (CPU, memory, pods) relabelled with its fleet, region,
// revision and instance, so that one scrape of herd up sees the whole fleet.
//
// Every instance's agent exports herd_node_cpu_seconds_total, a counter of the CPU seconds the
// whole instance has used; a counter says nothing by itself, so the scraper keeps the last two
// samples of each instance and turns them into a rate (percent of one core), then averages the
// rates of a fleet's instances, which is the per-instance figure the CPU strategy tracks.
//
// The scraper is deliberately forgiving: an instance that is booting, dead, slow or answering
// nonsense is skipped for that pass (logged at Debug, and herd_instance_agent_up 0) and simply does
// not count, so one bad instance never holds up the figure for its fleet-mates.
package agentmetrics

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"herd.dev/herd/internal/agentauth"
)

// The agent's families that are read (internal/agent/metrics.go).
const (
	cpuMetric      = "herd_node_cpu_seconds_total"
	memoryMetric   = "herd_node_memory_working_set_bytes"
	podsMetric     = "herd_pods"
	restartsMetric = "herd_container_restarts"
	readyMetric    = "herd_agent_ready"
)

const (
	// maxBody bounds what one scrape reads; an agent's page is a few KiB, so anything near this is
	// broken and must not cost the controller memory.
	maxBody = 4 << 20
	// parallel bounds the scrapes in flight, so a large fleet does not open hundreds of connections
	// at once.
	parallel = 16
	// staleIntervals is how many intervals a sample stays usable; past that the instance has
	// failed several scrapes in a row and its last rate no longer describes it.
	staleIntervals = 3
	// An agent that failed failuresBeforeBackoff scrapes in a row (an instance without an agent,
	// such as the fake provider's, or one that hangs) is tried only every backoffIntervals
	// intervals, so dead addresses do not cost a connection each per pass.
	failuresBeforeBackoff = 3
	backoffIntervals      = 15
)

// Target is one instance to scrape.
type Target struct {
	Fleet    string
	Region   string
	Revision string
	Instance string
	Address  string // IP address of the instance (no port)
}

// Options configures a Scraper.
type Options struct {
	// Targets returns the instances to scrape now (called once per pass). Required.
	Targets func() []Target
	// Interval is the time between passes of Start. Default: 2s.
	Interval time.Duration
	// Timeout bounds one scrape. Default: 1s.
	Timeout time.Duration
	// Port is the agents' port (agent.DefaultPort). Required.
	Port int
	// Credential returns the credential of an instance's agent (internal/agentauth), sent with
	// each scrape of it; an answer that does not prove the agent holds it too is not read.
	// Default: none sent, for endpoints that ask for none.
	Credential func(instance string) string
	// Client makes the requests. Default: a client with Timeout that ignores proxy settings from
	// the environment, since instance addresses are only reachable directly.
	Client *http.Client
	// Logger gets a Debug line per failed scrape. Default: discard.
	Logger *slog.Logger
	// Now is the clock, for tests. Default: time.Now.
	Now func() time.Time
}

// Scraper scrapes the agents and keeps the CPU rate of each instance.
type Scraper struct {
	opts Options
	log  *slog.Logger

	// pass serialises passes, so that a slow pass cannot record an instance a newer pass has
	// already forgotten.
	pass sync.Mutex

	mu     sync.Mutex
	series map[key]*series
}

type key struct{ fleet, instance string }

// series is what is kept of one instance: its last sample and the rate from the one before.
type series struct {
	target  Target
	up      bool      // whether the last scrape succeeded
	at      time.Time // when the last sample was taken; zero before the first
	sample  sample
	rate    float64 // percent of one core between the last two samples
	hasRate bool    // false until there are two usable samples
	// failures counts scrapes failed in a row, the last at tried.
	failures int
	tried    time.Time
}

// sample is what one scrape of an agent read. Only the CPU counter is required; the others are
// reported when the agent has them (it cannot list pods before its cluster's API serves).
type sample struct {
	cpu      float64            // herd_node_cpu_seconds_total
	gauges   map[string]float64 // herd_node_memory_working_set_bytes, herd_container_restarts, herd_agent_ready
	podPhase map[string]float64 // herd_pods by phase
}

// New checks opts and fills in the defaults.
func New(opts Options) (*Scraper, error) {
	switch {
	case opts.Targets == nil:
		return nil, errors.New("agentmetrics: Targets is required")
	case opts.Port <= 0 || opts.Port > 65535:
		return nil, fmt.Errorf("agentmetrics: Port %d is not a valid port", opts.Port)
	case opts.Interval < 0:
		return nil, fmt.Errorf("agentmetrics: Interval %v is negative", opts.Interval)
	case opts.Timeout < 0:
		return nil, fmt.Errorf("agentmetrics: Timeout %v is negative", opts.Timeout)
	}
	if opts.Interval == 0 {
		opts.Interval = 2 * time.Second
	}
	if opts.Timeout == 0 {
		opts.Timeout = time.Second
	}
	if opts.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		opts.Client = &http.Client{Timeout: opts.Timeout, Transport: tr}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Scraper{
		opts:   opts,
		log:    opts.Logger.With("component", "agentmetrics"),
		series: map[key]*series{},
	}, nil
}

// Start scrapes every Interval, the first pass at once, until ctx ends. It returns nil then: a
// failed scrape is not an error of the scraper.
func (s *Scraper) Start(ctx context.Context) error {
	tick := time.NewTicker(s.opts.Interval)
	defer tick.Stop()
	for {
		s.ScrapeOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// ScrapeOnce scrapes every target once, at most parallel at a time, and returns when all are done
// or have timed out.
func (s *Scraper) ScrapeOnce(ctx context.Context) {
	s.pass.Lock()
	defer s.pass.Unlock()
	targets := s.due(s.forget(s.opts.Targets()))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, t := range targets {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			s.scrape(ctx, t)
		})
	}
}

// FleetCPU returns the fleet's average CPU use per instance, in percent of one core, over the last
// two scrapes of each instance; instances is how many instances are behind the figure; ok is false
// when no instance of the fleet has two scrapes yet.
func (s *Scraper) FleetCPU(fleet string) (percent float64, instances int, ok bool) {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var sum float64
	for k, sr := range s.series {
		if k.fleet == fleet && sr.hasRate && !s.stale(sr.at, now) {
			sum += sr.rate
			instances++
		}
	}
	if instances == 0 {
		return 0, 0, false
	}
	return sum / float64(instances), instances, true
}

// forget drops the instances that are no longer targets, so memory follows the fleets, and returns
// the targets without duplicates.
func (s *Scraper) forget(targets []Target) []Target {
	want := make(map[key]bool, len(targets))
	unique := make([]Target, 0, len(targets))
	for _, t := range targets {
		k := key{t.Fleet, t.Instance}
		if !want[k] {
			want[k] = true
			unique = append(unique, t)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.series {
		if !want[k] {
			delete(s.series, k)
		}
	}
	return unique
}

// due returns the targets to scrape on this pass: all but those backing off after failures in a
// row, until their backoff has passed.
func (s *Scraper) due(targets []Target) []Target {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := targets[:0]
	for _, t := range targets {
		sr := s.series[key{t.Fleet, t.Instance}]
		if sr == nil || sr.target.Address != t.Address || sr.failures < failuresBeforeBackoff ||
			now.Sub(sr.tried) >= backoffIntervals*s.opts.Interval {
			out = append(out, t)
		}
	}
	return out
}

// scrape takes one sample of t and records it; a failure keeps the previous sample, which ages
// out by itself if the failures go on.
func (s *Scraper) scrape(ctx context.Context, t Target) {
	smp, at, err := s.fetch(ctx, t)
	if err != nil {
		s.log.Debug("scrape failed", "fleet", t.Fleet, "instance", t.Instance, "address", t.Address, "err", err)
		s.failed(t)
		return
	}
	s.record(t, at, smp)
}

// fetch reads a sample from the agent of t, and the time it was read.
func (s *Scraper) fetch(ctx context.Context, t Target) (sample, time.Time, error) {
	// The context bounds the whole scrape, body included, even with a caller's Client that has no
	// timeout of its own.
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	url := "http://" + net.JoinHostPort(t.Address, strconv.Itoa(s.opts.Port)) + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return sample{}, time.Time{}, err
	}
	verify := func(*http.Response) error { return nil }
	if s.opts.Credential != nil {
		verify = agentauth.Authorize(req, s.opts.Credential(t.Instance))
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4") // the format the parser reads
	resp, err := s.opts.Client.Do(req)
	if err != nil {
		return sample{}, time.Time{}, err
	}
	defer resp.Body.Close()
	if err := verify(resp); err != nil {
		return sample{}, time.Time{}, err
	}
	// The agent reads the counter just before it answers, so the headers' arrival is the closest
	// time to the reading.
	at := s.opts.Now()
	if resp.StatusCode != http.StatusOK {
		return sample{}, time.Time{}, fmt.Errorf("status %s", resp.Status)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return sample{}, time.Time{}, err
	}
	if len(body) > maxBody {
		return sample{}, time.Time{}, fmt.Errorf("body over %d bytes", maxBody)
	}
	smp, err := parse(body)
	return smp, at, err
}

// parse reads a sample from a page of Prometheus text. The CPU counter must be there; the other
// families are taken when they are well formed and skipped otherwise.
func parse(body []byte) (sample, error) {
	// The zero TextParser has no validation scheme and rejects everything; UTF-8 is the
	// permissive one, and the agent's names are plain anyway.
	p := expfmt.NewTextParser(model.UTF8Validation)
	families, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return sample{}, err
	}
	mf := families[cpuMetric]
	if mf == nil {
		return sample{}, fmt.Errorf("no %s", cpuMetric)
	}
	if len(mf.GetMetric()) != 1 || mf.GetMetric()[0].GetCounter() == nil {
		return sample{}, fmt.Errorf("%s is not a single counter", cpuMetric)
	}
	smp := sample{cpu: mf.GetMetric()[0].GetCounter().GetValue(), gauges: map[string]float64{}}
	if !usable(smp.cpu) {
		return sample{}, fmt.Errorf("%s is %v", cpuMetric, smp.cpu)
	}
	for _, name := range []string{memoryMetric, restartsMetric, readyMetric} {
		if mf := families[name]; mf != nil && len(mf.GetMetric()) == 1 && mf.GetMetric()[0].GetGauge() != nil {
			if v := mf.GetMetric()[0].GetGauge().GetValue(); usable(v) {
				smp.gauges[name] = v
			}
		}
	}
	if mf := families[podsMetric]; mf != nil {
		smp.podPhase = map[string]float64{}
		for _, m := range mf.GetMetric() {
			if m.GetGauge() == nil || len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "phase" || !usable(m.GetGauge().GetValue()) {
				continue
			}
			smp.podPhase[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
		}
	}
	return smp, nil
}

// usable reports whether v can be a count or an amount.
func usable(v float64) bool { return v >= 0 && !math.IsNaN(v) && !math.IsInf(v, 0) }

// record stores a sample of t and computes its rate from the previous one when that is usable.
func (s *Scraper) record(t Target, at time.Time, smp sample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{t.Fleet, t.Instance}
	next := &series{target: t, up: true, at: at, sample: smp}
	// The previous sample is not a baseline when there is none, the counter went down (the agent
	// restarted), the address changed (another machine under the same name), the clock did not move
	// forward, or it is stale (a rate over a long outage says little about now). The new sample
	// starts over.
	if prev := s.series[k]; prev != nil && !prev.at.IsZero() && prev.target.Address == t.Address &&
		smp.cpu >= prev.sample.cpu && at.After(prev.at) && !s.stale(prev.at, at) {
		next.rate = (smp.cpu - prev.sample.cpu) / at.Sub(prev.at).Seconds() * 100
		next.hasRate = true
	}
	s.series[k] = next
}

// failed records that t could not be scraped; its last sample stays, and ages out by itself.
func (s *Scraper) failed(t Target) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{t.Fleet, t.Instance}
	now := s.opts.Now()
	if sr := s.series[k]; sr != nil && sr.target.Address == t.Address {
		sr.up = false
		sr.target = t
		sr.failures++
		sr.tried = now
		return
	}
	s.series[k] = &series{target: t, failures: 1, tried: now}
}

// stale reports whether a sample taken at "at" is too old to use at now.
func (s *Scraper) stale(at, now time.Time) bool {
	return now.Sub(at) > staleIntervals*s.opts.Interval
}
