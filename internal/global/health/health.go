// Package health tells whether each region can be reached from where its clients are: it
// probes each regional load balancer's data address from the clients' side every second and
// judges with thresholds, like a load balancer's health check, so that a partitioned region
// reads unreachable within 3 s and a region that answers again reads reachable as fast. The
// controller asks it before acting on a region (a partition is not a death: instances cut off
// from their clients are not replaced), and it reports transitions so that the region's fleets
// are looked at at once.
package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults of Options.
const (
	DefaultInterval = time.Second
	// DefaultTimeout bounds one probe: a TCP connect takes one round trip, and no region's link
	// adds near this much.
	DefaultTimeout     = 500 * time.Millisecond
	DefaultFailures    = 2
	DefaultSuccesses   = 2
	DefaultParallelism = 3
	// FallbackPort is probed on a region whose load balancer has no listener yet: the router's
	// refusal (a TCP reset) proves the network answers.
	FallbackPort = 9
)

// Target is a region to probe: its load balancer's data address and a port there.
type Target struct {
	Region  string
	Address netip.Addr
	Port    int
}

// Options configure a Checker.
type Options struct {
	// Targets returns the regions to probe now. Regions it stops returning are forgotten.
	Targets func() []Target
	// Dial opens a connection from the clients' side (regionnet.Networks.DialFromClients). Required.
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// OnChange, when set, is called with a region that became unreachable or reachable again. It
	// must return at once.
	OnChange func(region string)
	// Interval between probes of a region. Default DefaultInterval.
	Interval time.Duration
	// Timeout bounds a probe. Default DefaultTimeout.
	Timeout time.Duration
	// Failures in a row make a reachable region unreachable; Successes in a row make it
	// reachable again. Defaults DefaultFailures and DefaultSuccesses.
	Failures, Successes int
	// Parallelism is how many connections one probe opens at once; one answering is enough, so
	// that a lossy but connected region is not judged cut off. Default DefaultParallelism.
	Parallelism int
	Logger      *slog.Logger
}

// Checker probes regions. It implements the controller's RegionReachability.
type Checker struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	regions map[string]*regionState
}

type regionState struct {
	target      Target
	unreachable bool
	passes      int
	fails       int
	lastErr     error
	since       time.Time // of the current verdict
}

// New returns a Checker; Run it.
func New(opts Options) (*Checker, error) {
	if opts.Targets == nil || opts.Dial == nil {
		return nil, errors.New("health: Targets and Dial are required")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Failures <= 0 {
		opts.Failures = DefaultFailures
	}
	if opts.Successes <= 0 {
		opts.Successes = DefaultSuccesses
	}
	if opts.Parallelism <= 0 {
		opts.Parallelism = DefaultParallelism
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Checker{opts: opts, log: opts.Logger.With("component", "regionhealth"), regions: map[string]*regionState{}}, nil
}

// Run probes every region each Interval until ctx ends.
func (c *Checker) Run(ctx context.Context) error {
	tick := time.NewTicker(c.opts.Interval)
	defer tick.Stop()
	for {
		c.ProbeAll(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// ProbeAll probes every target once, all at once, and judges each.
func (c *Checker) ProbeAll(ctx context.Context) {
	targets := c.opts.Targets()
	c.forget(targets)
	var wg sync.WaitGroup
	for _, t := range targets {
		wg.Go(func() { c.judge(t, c.probe(ctx, t)) })
	}
	wg.Wait()
}

// probe opens Parallelism connections to the target from the clients' side; the first to be
// answered, by a handshake or by a refusal, makes it reachable.
func (c *Checker) probe(ctx context.Context, t Target) error {
	port := t.Port
	if port == 0 {
		port = FallbackPort
	}
	addr := net.JoinHostPort(t.Address.String(), strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(ctx, c.opts.Timeout)
	defer cancel()
	errc := make(chan error, c.opts.Parallelism)
	dial := c.opts.Dial
	for range c.opts.Parallelism {
		go func() {
			conn, err := dial(ctx, "tcp", addr)
			if err == nil {
				conn.Close()
			}
			if errors.Is(err, syscall.ECONNREFUSED) {
				err = nil // the region's network answered for its load balancer's address
			}
			errc <- err
		}()
	}
	var last error
	for range c.opts.Parallelism {
		if last = <-errc; last == nil {
			return nil // the others end with ctx
		}
	}
	return fmt.Errorf("no answer from %s within %s: %w", addr, c.opts.Timeout, last)
}

// judge applies a probe's result with the thresholds; a region's first probe decides at once.
func (c *Checker) judge(t Target, err error) {
	c.mu.Lock()
	s, known := c.regions[t.Region]
	if !known {
		s = &regionState{since: time.Now()}
		c.regions[t.Region] = s
	}
	s.target = t
	was := s.unreachable
	if err == nil {
		s.passes, s.fails = s.passes+1, 0
	} else {
		s.passes, s.fails, s.lastErr = 0, s.fails+1, err
	}
	switch {
	case !known:
		s.unreachable = err != nil
	case !was && s.fails >= c.opts.Failures:
		s.unreachable = true
	case was && s.passes >= c.opts.Successes:
		s.unreachable = false
	}
	changed := s.unreachable != was || (!known && s.unreachable)
	if s.unreachable != was {
		s.since = time.Now()
	}
	c.mu.Unlock()
	if !changed {
		return
	}
	if s.unreachable {
		c.log.Warn("region unreachable from its clients' side", "region", t.Region, "address", t.Address, "err", err)
	} else {
		c.log.Info("region reachable again", "region", t.Region, "address", t.Address)
	}
	if c.opts.OnChange != nil {
		c.opts.OnChange(t.Region)
	}
}

// forget drops the regions no longer probed; one that was unreachable is reported changed.
func (c *Checker) forget(targets []Target) {
	keep := map[string]bool{}
	for _, t := range targets {
		keep[t.Region] = true
	}
	var changed []string
	c.mu.Lock()
	for region, s := range c.regions {
		if !keep[region] {
			delete(c.regions, region)
			if s.unreachable {
				changed = append(changed, region)
			}
		}
	}
	c.mu.Unlock()
	for _, r := range changed {
		if c.opts.OnChange != nil {
			c.opts.OnChange(r)
		}
	}
}

// RegionUnreachable implements the controller's RegionReachability: whether the region's
// clients cannot reach it now, and why. A region not probed (none of its fleets is served by a
// regional load balancer, or no probe has ended yet) is not unreachable.
func (c *Checker) RegionUnreachable(region string) (why string, unreachable bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.regions[region]
	if s == nil || !s.unreachable {
		return "", false
	}
	return fmt.Sprintf("unreachable from its clients' side since %s (%d probes in a row failed): %v",
		s.since.UTC().Format(time.RFC3339), s.fails, s.lastErr), true
}

// RegionStatus is a region as the probes judge it.
type RegionStatus struct {
	Region    string
	Reachable bool
	// Since is when the verdict last changed (or the first probe ended).
	Since time.Time
	// Error is the last failed probe's error while unreachable.
	Error string
}

// Status returns every region probed, by name.
func (c *Checker) Status() []RegionStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]RegionStatus, 0, len(c.regions))
	for region, s := range c.regions {
		rs := RegionStatus{Region: region, Reachable: !s.unreachable, Since: s.since}
		if s.unreachable && s.lastErr != nil {
			rs.Error = s.lastErr.Error()
		}
		out = append(out, rs)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Region < out[j].Region })
	return out
}

// Collector exposes herd_region_reachable{region}: 1 when the region's clients reach it, 0 when
// they do not, for every region probed.
func (c *Checker) Collector() prometheus.Collector { return collector{c} }

var reachableDesc = prometheus.NewDesc("herd_region_reachable",
	"Whether the region's load balancer is reachable from its clients' side (1) or not (0), as the control plane's probes judge it.",
	[]string{"region"}, nil)

type collector struct{ c *Checker }

func (collector) Describe(ch chan<- *prometheus.Desc) { ch <- reachableDesc }

func (k collector) Collect(ch chan<- prometheus.Metric) {
	k.c.mu.Lock()
	defer k.c.mu.Unlock()
	for region, s := range k.c.regions {
		v := 1.0
		if s.unreachable {
			v = 0
		}
		ch <- prometheus.MustNewConstMetric(reachableDesc, prometheus.GaugeValue, v, region)
	}
}
