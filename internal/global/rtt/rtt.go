// Package rtt collects the round trip from each client network to each region, as the regions'
// own load balancers measure it on their clients' connections: the figures a latency-based DNS
// answer (global/routes, global/dns) ranks regions by.
package rtt

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"herd.dev/herd/internal/lb"
)

// DefaultInterval is how often a Collector reads every regional load balancer's round-trip table.
const DefaultInterval = 3 * time.Second

// Source is a load balancer's table of round trips to its client networks: *lb.AdminClient
// (GET /rtt) for a load balancer elsewhere.
type Source interface {
	ClientRTTs() ([]lb.NetworkRTT, error)
}

// Options configure a Collector.
type Options struct {
	// Sources returns the regions' load balancers to read, by region name; *regionlb.Regional's
	// RTTSources does. Required.
	Sources func() map[string]Source
	// Interval is how often every source is read. Default: DefaultInterval.
	Interval time.Duration
	Logger   *slog.Logger
}

// Collector gathers the round trip from each client network to each region, as the regions' own
// load balancers measure it on their clients' connections (the kernel's smoothed RTT, per /24 or
// /48): what a latency-based DNS answer or a front door ranks regions by. It reads every source
// every Interval; a source that cannot be read keeps its last table, a region that is no longer
// a source loses it.
type Collector struct {
	opts Options
	log  *slog.Logger

	mu     sync.Mutex
	tables map[string]regionRTTs // by region
}

// regionRTTs is the last table read from one region's load balancer.
type regionRTTs struct {
	table  []lb.NetworkRTT
	readAt time.Time
	err    error
}

// RegionRTT is one region's round trip to one client network.
type RegionRTT struct {
	Region string
	RTT    lb.NetworkRTT
}

// Status is what a Collector last read from one region's load balancer.
type Status struct {
	Region string
	// Networks is how many client networks its table holds.
	Networks int
	// ReadAt is when its table was last read; zero if never.
	ReadAt time.Time
	// Error says why the last read failed ("" if it did not).
	Error string
}

// New returns a Collector; Run it.
func New(opts Options) *Collector {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	return &Collector{opts: opts, log: opts.Logger.With("component", "region-rtt"), tables: map[string]regionRTTs{}}
}

// Run reads the sources at once, then every Interval, until ctx ends.
func (r *Collector) Run(ctx context.Context) error {
	tick := time.NewTicker(r.opts.Interval)
	defer tick.Stop()
	for {
		r.Refresh()
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// Refresh reads every source now, all at once (a load balancer that does not answer delays
// only its own region), and returns when every read ended.
func (r *Collector) Refresh() {
	sources := r.opts.Sources()
	var wg sync.WaitGroup
	for region, src := range sources {
		wg.Go(func() {
			table, err := src.ClientRTTs()
			r.mu.Lock()
			defer r.mu.Unlock()
			prev := r.tables[region]
			if err != nil {
				if prev.err == nil {
					r.log.Warn("cannot read the round trips of a region's load balancer; keeping its last table", "region", region, "err", err)
				}
				prev.err = err
				r.tables[region] = prev
				return
			}
			r.tables[region] = regionRTTs{table: table, readAt: time.Now()}
		})
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	for region := range r.tables {
		if _, ok := sources[region]; !ok {
			delete(r.tables, region)
		}
	}
}

// ClientRTTs returns the round trip from each client network to each region that measured it:
// client network -> region name -> RTT. The maps are the caller's.
func (r *Collector) ClientRTTs() map[netip.Prefix]map[string]time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[netip.Prefix]map[string]time.Duration{}
	for region, t := range r.tables {
		for _, e := range t.table {
			if out[e.Network] == nil {
				out[e.Network] = map[string]time.Duration{}
			}
			out[e.Network][region] = e.SRTT
		}
	}
	return out
}

// Entries returns every region's table as one list, sorted by client network, then region.
func (r *Collector) Entries() []RegionRTT {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RegionRTT
	for region, t := range r.tables {
		for _, e := range t.table {
			out = append(out, RegionRTT{Region: region, RTT: e})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i].RTT.Network, out[j].RTT.Network
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c < 0
		}
		if a.Bits() != b.Bits() {
			return a.Bits() < b.Bits()
		}
		return out[i].Region < out[j].Region
	})
	return out
}

// Status returns, by region in name order, what the last reads found.
func (r *Collector) Status() []Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Status, 0, len(r.tables))
	for _, region := range slices.Sorted(maps.Keys(r.tables)) {
		t := r.tables[region]
		s := Status{Region: region, Networks: len(t.table), ReadAt: t.readAt}
		if t.err != nil {
			s.Error = t.err.Error()
		}
		out = append(out, s)
	}
	return out
}
