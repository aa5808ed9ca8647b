package edge

import "github.com/prometheus/client_golang/prometheus"

// Metrics are an edge location's counters. It is a prometheus.Collector.
type Metrics struct {
	hits, misses, coalesced, stores, validations, invalidations prometheus.Counter
	originRequests, originErrors, originFailovers, bytesServed  prometheus.Counter
	all                                                         []prometheus.Collector
}

func newMetrics() *Metrics {
	m := &Metrics{}
	counter := func(name, help string) prometheus.Counter {
		c := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "herd", Subsystem: "edge", Name: name, Help: help})
		m.all = append(m.all, c)
		return c
	}
	m.hits = counter("hits_total", "Requests answered from the cache, fresh, stale or after a 304 from the origin.")
	m.misses = counter("misses_total", "Requests answered with what the origin sent, stored or not.")
	m.coalesced = counter("coalesced_requests_total", "Requests that waited for another request's origin fetch of the same key.")
	m.stores = counter("stores_total", "Responses stored.")
	m.validations = counter("validations_total", "Stored responses refreshed by a 304 from the origin.")
	m.invalidations = counter("invalidations_total", "Stored URIs dropped after an unsafe method.")
	m.originRequests = counter("origin_requests_total", "Requests sent to an origin.")
	m.originErrors = counter("origin_errors_total", "Requests answered 502 because the origin could not be reached or its response broke.")
	m.originFailovers = counter("origin_failovers_total", "Requests sent to the secondary origin after the primary failed.")
	m.bytesServed = counter("bytes_served_total", "Response body bytes written to clients.")
	return m
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
