package cpmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// QueueMetrics gives client-go work queues their metrics in client_golang, labelled by queue
// name, as controller-runtime does for its controllers: client-go defines the metrics a queue
// keeps but leaves their backend to the program. Pass it as the controller's Options.QueueMetrics
// and register it as a collector.
type QueueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

var _ workqueue.MetricsProvider = (*QueueMetrics)(nil)

// NewQueueMetrics returns the metrics of every queue made with it.
func NewQueueMetrics() *QueueMetrics {
	labels := []string{"name"}
	// From 1 ms to about 30 s, as a reconcile's wait and work range.
	buckets := prometheus.ExponentialBuckets(0.001, 2, 16)
	return &QueueMetrics{
		depth: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herd_workqueue_depth",
			Help: "Keys waiting in the work queue."}, labels),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herd_workqueue_unfinished_work_seconds",
			Help: "Seconds of work in progress not yet done; a steady rise means a stuck worker."}, labels),
		longest: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "herd_workqueue_longest_running_processor_seconds",
			Help: "Seconds the longest running worker has worked on its key."}, labels),
		adds: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herd_workqueue_adds_total",
			Help: "Keys added to the work queue."}, labels),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "herd_workqueue_retries_total",
			Help: "Keys requeued after a failed reconcile."}, labels),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herd_workqueue_queue_duration_seconds",
			Help: "Seconds a key waits in the queue before a worker takes it.", Buckets: buckets}, labels),
		work: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "herd_workqueue_work_duration_seconds",
			Help: "Seconds a worker takes on one key (one reconcile).", Buckets: buckets}, labels),
	}
}

func (m *QueueMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.depth, m.unfinished, m.longest, m.adds, m.retries, m.latency, m.work}
}

// Describe implements prometheus.Collector.
func (m *QueueMetrics) Describe(ch chan<- *prometheus.Desc) {
	collectorSet(m.collectors()).Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *QueueMetrics) Collect(ch chan<- prometheus.Metric) { collectorSet(m.collectors()).Collect(ch) }

// collectorSet is several collectors as one.
type collectorSet []prometheus.Collector

func (s collectorSet) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s {
		c.Describe(ch)
	}
}

func (s collectorSet) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s {
		c.Collect(ch)
	}
}

func (m *QueueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}

func (m *QueueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}

func (m *QueueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}

func (m *QueueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.work.WithLabelValues(name)
}

func (m *QueueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}

func (m *QueueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longest.WithLabelValues(name)
}

func (m *QueueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}
