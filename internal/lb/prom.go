package lb

import (
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

var (
	targetLabels = []string{"fleet", "listener", "group", "target"}

	descRequests = prometheus.NewDesc("herd_lb_requests_total",
		"Requests finished per target, by outcome class (1xx-5xx, failed: the client went away).",
		append(targetLabels, "class"), nil)
	descDuration = prometheus.NewDesc("herd_lb_request_duration_seconds",
		"Time from receiving a request to the end of its response, per target.", targetLabels, nil)
	descInFlight = prometheus.NewDesc("herd_lb_in_flight_requests",
		"Requests (TCP: connections) open per target.", targetLabels, nil)
	descRetries = prometheus.NewDesc("herd_lb_retries_total",
		"Requests retried on another target after failing on this one.", targetLabels, nil)
	descEjections = prometheus.NewDesc("herd_lb_ejections_total",
		"Passive ejections per target.", targetLabels, nil)
	descHealthy = prometheus.NewDesc("herd_lb_target_healthy",
		"1 if the target takes new requests, else 0 (unknown, unhealthy, ejected or draining).", targetLabels, nil)
	descUnrouted = prometheus.NewDesc("herd_lb_unrouted_requests_total",
		"Requests answered without a target: 503 when none was healthy, 4xx when rejected as bad.",
		[]string{"fleet", "listener", "class"}, nil)
	descHeld = prometheus.NewDesc("herd_lb_held_requests",
		"Requests waiting for a healthy target of the listener right now (scale from zero, first boot).",
		[]string{"fleet", "listener"}, nil)
	descTenantRequests = prometheus.NewDesc("herd_lb_tenant_requests_total",
		"Requests per tenant of a fleet with tenancy (held ones included): one series per tenant that has had a request or an instance, no more.",
		[]string{"fleet", "tenant"}, nil)
	descTenantLast = prometheus.NewDesc("herd_lb_tenant_last_request_timestamp_seconds",
		"When the latest request of each tenant came (idleAfter counts from it).", []string{"fleet", "tenant"}, nil)
	descTenantQueued = prometheus.NewDesc("herd_lb_tenant_queued_total",
		"Requests of each tenant that waited for a place in its bound (spec.tenancy.maxInFlight); only tenants that had one.", []string{"fleet", "tenant"}, nil)
	descTenantLimited = prometheus.NewDesc("herd_lb_tenant_limited_total",
		"Requests of each tenant answered 429 because its bound (spec.tenancy.maxInFlight) had no place within spec.tenancy.maxWait; only tenants that had one.", []string{"fleet", "tenant"}, nil)
	descBad = prometheus.NewDesc("herd_lb_bad_requests_total",
		"Requests rejected as malformed or over a limit, on all listeners.", nil, nil)
	descClientRTT = prometheus.NewDesc("herd_lb_client_rtt_seconds",
		"The kernel's smoothed round-trip time of client connections, one sample per connection (GET /rtt of the admin API has it per client network).", nil, nil)
	descClientNetworks = prometheus.NewDesc("herd_lb_client_networks",
		"Client networks (/24, /48) whose round-trip time the load balancer remembers.", nil, nil)
)

// Collector returns a Prometheus collector of the load balancer's metrics, to register in a registry
// of the caller's (herd up shares one). It reads the same counters as Metrics, so it costs the request
// path nothing.
func (lb *LB) Collector() prometheus.Collector { return promCollector{lb} }

// MetricsHandler serves the load balancer's metrics, with Go runtime and process metrics, in the
// Prometheus exposition format.
func (lb *LB) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(lb.Collector(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
}

type promCollector struct{ lb *LB }

func (c promCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descDuration, descInFlight, descRetries, descEjections, descHealthy, descUnrouted, descHeld, descTenantRequests, descTenantLast, descTenantQueued, descTenantLimited, descBad, descClientRTT, descClientNetworks} {
		ch <- d
	}
}

func (c promCollector) Collect(ch chan<- prometheus.Metric) {
	c.lb.mu.Lock()
	targets := c.lb.allTargets()
	listeners := c.lb.allListeners()
	c.lb.mu.Unlock()
	for _, t := range targets {
		k := t.key
		labels := []string{k.fleet, k.listener, k.group, k.id}
		s := t.stats.snapshot()
		for class, n := range s.Requests {
			ch <- prometheus.MustNewConstMetric(descRequests, prometheus.CounterValue, float64(n), append(labels, Class(class).String())...)
		}
		buckets := make(map[float64]uint64, len(LatencyBuckets))
		var cum uint64
		for i, b := range LatencyBuckets {
			cum += s.Latency[i]
			buckets[b] = cum
		}
		count := cum + s.Latency[len(LatencyBuckets)]
		ch <- prometheus.MustNewConstHistogram(descDuration, count, s.LatencySum.Seconds(), buckets, labels...)
		ch <- prometheus.MustNewConstMetric(descInFlight, prometheus.GaugeValue, float64(s.InFlight), labels...)
		ch <- prometheus.MustNewConstMetric(descRetries, prometheus.CounterValue, float64(s.Retries), labels...)
		ch <- prometheus.MustNewConstMetric(descEjections, prometheus.CounterValue, float64(s.Ejections), labels...)
		healthy := 0.0
		if t.usable() {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(descHealthy, prometheus.GaugeValue, healthy, labels...)
	}
	for _, l := range listeners {
		s := l.stats.snapshot()
		fleet := l.state.Load().cfg.Fleet
		for _, class := range []Class{Class4xx, Class5xx} {
			ch <- prometheus.MustNewConstMetric(descUnrouted, prometheus.CounterValue, float64(s.Requests[class]), fleet, l.name, class.String())
		}
		ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(s.Held), fleet, l.name)
	}
	c.lb.tenants.stats.Range(func(k, v any) bool {
		fleet, tenant, _ := strings.Cut(k.(string), "/")
		s := statOf(fleet, tenant, v.(*tenantStats))
		ch <- prometheus.MustNewConstMetric(descTenantRequests, prometheus.CounterValue, float64(s.Requests), fleet, tenant)
		if !s.LastRequest.IsZero() {
			ch <- prometheus.MustNewConstMetric(descTenantLast, prometheus.GaugeValue, float64(s.LastRequest.UnixNano())/1e9, fleet, tenant)
		}
		// Most tenants never reach their bound: their series would only multiply 5,000 tenants' zeros.
		if s.Queued > 0 {
			ch <- prometheus.MustNewConstMetric(descTenantQueued, prometheus.CounterValue, float64(s.Queued), fleet, tenant)
		}
		if s.Limited > 0 {
			ch <- prometheus.MustNewConstMetric(descTenantLimited, prometheus.CounterValue, float64(s.Limited), fleet, tenant)
		}
		return true
	})
	ch <- prometheus.MustNewConstMetric(descBad, prometheus.CounterValue, float64(c.lb.badRequests.Load()))
	r := c.lb.rtt
	buckets := make(map[float64]uint64, len(LatencyBuckets))
	var cum uint64
	for i, b := range LatencyBuckets {
		cum += r.hist[i].Load()
		buckets[b] = cum
	}
	count := cum + r.hist[len(LatencyBuckets)].Load()
	ch <- prometheus.MustNewConstHistogram(descClientRTT, count, float64(r.histSum.Load())/1e9, buckets)
	ch <- prometheus.MustNewConstMetric(descClientNetworks, prometheus.GaugeValue, float64(r.len()))
}
