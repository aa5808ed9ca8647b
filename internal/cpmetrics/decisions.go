package cpmetrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/controller"
)

// Decisions counts what the control plane asked of its providers and what it decided: provider
// calls with their latency and errors, events by type and reason (healing replacements and
// backoffs, rollout steps, scale-outs and scale-ins), each autoscaled fleet's last inputs, and
// the orphans found and deleted.
// herd up wires its methods into the controller, the event recorder and the autoscaler, and
// registers it in /metrics.
type Decisions struct {
	calls       *prometheus.HistogramVec
	callErrors  *prometheus.CounterVec
	events      *prometheus.CounterVec
	input       *prometheus.GaugeVec
	target      *prometheus.GaugeVec
	recommended *prometheus.GaugeVec
	orphans     *prometheus.GaugeVec
	orphansGone *prometheus.CounterVec
}

var (
	_ autoscaler.Observer       = (*Decisions)(nil)
	_ controller.OrphanObserver = (*Decisions)(nil)
)

// NewDecisions returns the collector, with nothing counted.
func NewDecisions() *Decisions {
	return &Decisions{
		calls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "herd_provider_call_duration_seconds",
			Help:    "Provider calls by provider and operation (create, delete, list): how long they took, failed ones included.",
			Buckets: []float64{.001, .005, .025, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"provider", "op"}),
		callErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herd_provider_call_errors_total",
			Help: "Provider calls that failed, by provider and operation.",
		}, []string{"provider", "op"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herd_events_total",
			Help: "Events recorded, by type (Normal, Warning) and reason: healing (InstanceFailed, InstanceUnhealthy, InstanceOutlier, HealingBackoff), rollouts (RolloutStarted, CanaryStep, RolloutSucceeded, ...), autoscaling (ScaledOut, ScaledIn) and the rest.",
		}, []string{"type", "reason"}),
		input: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herd_autoscaler_input",
			Help: "The last figure the autoscaler sampled for an autoscaled fleet, by metric: requestsPerSecond the fleet's total requests/s, cpu the average percent of a core per ready instance, latencyP95 milliseconds.",
		}, []string{"fleet", "metric"}),
		target: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herd_autoscaler_target",
			Help: "An autoscaled fleet's target for its metric (spec.autoscaling.target; requestsPerSecond per instance).",
		}, []string{"fleet", "metric"}),
		recommended: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herd_autoscaler_recommended_replicas",
			Help: "The desired count the autoscaler's last decision recommended for a fleet.",
		}, []string{"fleet"}),
		orphans: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "herd_orphans",
			Help: "Instances a provider runs that no fleet owns, as the orphan collector's last pass found them (herd get instances --orphans).",
		}, []string{"provider"}),
		orphansGone: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "herd_orphans_deleted_total",
			Help: "Orphans (instances no fleet owns) the controller deleted, by provider.",
		}, []string{"provider"}),
	}
}

// ProviderCall counts one provider call (controller.Options.ProviderCalls).
func (d *Decisions) ProviderCall(provider, op string, took time.Duration, err error) {
	d.calls.WithLabelValues(provider, op).Observe(took.Seconds())
	if err != nil {
		d.callErrors.WithLabelValues(provider, op).Inc()
	}
}

// Event counts one recorded event (events.Options.Recorded).
func (d *Decisions) Event(typ, reason string) { d.events.WithLabelValues(typ, reason).Inc() }

// Decided implements autoscaler.Observer.
func (d *Decisions) Decided(fleet string, cfg autoscaler.Config, s autoscaler.Sample, dec autoscaler.Decision) {
	d.input.WithLabelValues(fleet, string(cfg.Metric)).Set(s.Value)
	d.target.WithLabelValues(fleet, string(cfg.Metric)).Set(cfg.Target)
	d.recommended.WithLabelValues(fleet).Set(float64(dec.Desired))
}

// Forgotten implements autoscaler.Observer: the fleet's gauges go.
func (d *Decisions) Forgotten(fleet string) {
	for _, v := range []*prometheus.GaugeVec{d.input, d.target, d.recommended} {
		v.DeletePartialMatch(prometheus.Labels{"fleet": fleet})
	}
}

// OrphansFound implements controller.OrphanObserver.
func (d *Decisions) OrphansFound(provider string, n int) {
	d.orphans.WithLabelValues(provider).Set(float64(n))
}

// OrphanDeleted implements controller.OrphanObserver.
func (d *Decisions) OrphanDeleted(provider string) { d.orphansGone.WithLabelValues(provider).Inc() }

// Describe implements prometheus.Collector.
func (d *Decisions) Describe(ch chan<- *prometheus.Desc) { d.collectors().Describe(ch) }

// Collect implements prometheus.Collector.
func (d *Decisions) Collect(ch chan<- prometheus.Metric) { d.collectors().Collect(ch) }

func (d *Decisions) collectors() collectorSet {
	return collectorSet{d.calls, d.callErrors, d.events, d.input, d.target, d.recommended, d.orphans, d.orphansGone}
}
