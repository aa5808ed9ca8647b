package edge

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics are an edge location's counters. It is a prometheus.Collector.
type Metrics struct {
	requests, hits, misses, coalesced, stores, validations, invalidations    prometheus.Counter
	originRequests, originErrors, originFailovers, bytesServed, compressions prometheus.Counter
	all                                                                      []prometheus.Collector
}

func newMetrics(labels prometheus.Labels) *Metrics {
	m := &Metrics{}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "herd", Subsystem: "edge", Name: name, Help: help, ConstLabels: labels})
		m.all = append(m.all, c)
		return c
	}
	m.requests = counter("requests_total", "Requests received from clients.")
	m.hits = counter("hits_total", "Requests answered from the cache, fresh, stale or after a 304 from the origin.")
	m.misses = counter("misses_total", "Requests answered with what the origin sent, stored or not.")
	m.coalesced = counter("coalesced_requests_total", "Requests that waited for another request's origin fetch of the same key.")
	m.stores = counter("stores_total", "Responses stored.")
	m.validations = counter("validations_total", "Stored responses refreshed by a 304 from the origin.")
	m.invalidations = counter("invalidations_total", "Stored URIs dropped after an unsafe method or by an invalidation.")
	m.originRequests = counter("origin_requests_total", "Requests sent to an origin.")
	m.originErrors = counter("origin_errors_total", "Requests answered 502 because the origin could not be reached or its response broke.")
	m.originFailovers = counter("origin_failovers_total", "Requests sent to the secondary origin after the primary failed.")
	m.bytesServed = counter("bytes_served_total", "Response body bytes written to clients.")
	m.compressions = counter("compressions_total", "Stored responses compressed (gzip or br) for a client, each then stored as a variant.")
	return m
}

// watchMemory adds gauges of what the memory tier holds: how many URIs, and their weight in bytes,
// which the tier keeps within its bound.
func (m *Metrics) watchMemory(s *store, labels prometheus.Labels) {
	gauge := func(name, help string, read func() float64) {
		m.all = append(m.all, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "herd", Subsystem: "edge", Name: name, Help: help, ConstLabels: labels}, read))
	}
	gauge("memory_entries", "URIs held in the memory tier, each with its stored variants.", func() float64 { return float64(s.c.EstimatedSize()) })
	gauge("memory_bytes", "What the memory tier holds, in bytes as it weighs its entries against its bound.", func() float64 { return float64(s.c.WeightedSize()) })
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.all {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.all {
		c.Collect(ch)
	}
}

// Stats are an edge location's figures, read from its Prometheus counters.
type Stats struct {
	Requests        int64 `json:"requests"`
	Hits            int64 `json:"hits"`
	Misses          int64 `json:"misses"`
	Coalesced       int64 `json:"coalesced"`
	OriginRequests  int64 `json:"originRequests"`
	OriginErrors    int64 `json:"originErrors"`
	OriginFailovers int64 `json:"originFailovers"`
	Invalidations   int64 `json:"invalidations"`
	BytesServed     int64 `json:"bytesServed"`
}

// Add sums two locations' figures.
func (s Stats) Add(o Stats) Stats {
	return Stats{Requests: s.Requests + o.Requests, Hits: s.Hits + o.Hits, Misses: s.Misses + o.Misses, Coalesced: s.Coalesced + o.Coalesced,
		OriginRequests: s.OriginRequests + o.OriginRequests, OriginErrors: s.OriginErrors + o.OriginErrors,
		OriginFailovers: s.OriginFailovers + o.OriginFailovers, Invalidations: s.Invalidations + o.Invalidations,
		BytesServed: s.BytesServed + o.BytesServed}
}

// HitRatio is the share of the requests answered from the cache or the origin that the cache
// answered (0 before any).
func (s Stats) HitRatio() float64 {
	if s.Hits+s.Misses == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Hits+s.Misses)
}

// OriginOffload is the share of client requests that did not make an origin request: what the edge
// spared the origin (0 before any).
func (s Stats) OriginOffload() float64 {
	if s.Requests == 0 {
		return 0
	}
	return max(0, 1-float64(s.OriginRequests)/float64(s.Requests))
}

// Stats reads the counters.
func (m *Metrics) Stats() Stats {
	read := func(c prometheus.Counter) int64 {
		var d dto.Metric
		if c.Write(&d) != nil {
			return 0
		}
		return int64(d.GetCounter().GetValue())
	}
	return Stats{Requests: read(m.requests), Hits: read(m.hits), Misses: read(m.misses), Coalesced: read(m.coalesced),
		OriginRequests: read(m.originRequests), OriginErrors: read(m.originErrors), OriginFailovers: read(m.originFailovers),
		Invalidations: read(m.invalidations), BytesServed: read(m.bytesServed)}
}
