package agentmetrics

import (
	"sort"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	instanceLabels = []string{"fleet", "region", "revision", "instance"}

	descUp = prometheus.NewDesc("herd_instance_agent_up",
		"1 if the last scrape of the instance's agent succeeded, else 0.", instanceLabels, nil)
	descCPUCores = prometheus.NewDesc("herd_instance_cpu_cores",
		"CPU used by the instance, in cores, between herd's last two scrapes of its agent.", instanceLabels, nil)
	descCPUSeconds = prometheus.NewDesc("herd_instance_cpu_seconds_total",
		"CPU time used by the instance's processes (the agent's herd_node_cpu_seconds_total).", instanceLabels, nil)
	descMemory = prometheus.NewDesc("herd_instance_memory_bytes",
		"Memory used by the instance's processes, less the inactive page cache (the agent's herd_node_memory_working_set_bytes).",
		instanceLabels, nil)
	descPods = prometheus.NewDesc("herd_instance_pods",
		"Pods of the instance by phase (the agent's herd_pods).", append(instanceLabels, "phase"), nil)
	descRestarts = prometheus.NewDesc("herd_instance_container_restarts",
		"Sum of the restart counts of the containers of the instance's pods.", instanceLabels, nil)
	descReady = prometheus.NewDesc("herd_instance_workload_ready",
		"1 when the instance's node is Ready and every baked workload is available (the agent's herd_agent_ready).",
		instanceLabels, nil)
)

// gaugeDescs maps the agent's single gauges to the families herd up serves them as.
var gaugeDescs = map[string]*prometheus.Desc{memoryMetric: descMemory, restartsMetric: descRestarts, readyMetric: descReady}

// Collector returns a Prometheus collector of the instances' figures as of the last pass: each
// instance's agent_up, and, while its last sample is fresh, its CPU, memory and pods, labelled
// with its fleet, region, revision and instance. It reads what the passes keep; a scrape of herd
// up never waits for an agent.
func (s *Scraper) Collector() prometheus.Collector { return promCollector{s} }

type promCollector struct{ s *Scraper }

func (c promCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descUp, descCPUCores, descCPUSeconds, descMemory, descPods, descRestarts, descReady} {
		ch <- d
	}
}

func (c promCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sr := range s.series {
		t := sr.target
		labels := []string{t.Fleet, t.Region, t.Revision, t.Instance}
		ch <- prometheus.MustNewConstMetric(descUp, prometheus.GaugeValue, boolValue(sr.up), labels...)
		if sr.at.IsZero() || s.stale(sr.at, now) {
			continue
		}
		if sr.hasRate {
			ch <- prometheus.MustNewConstMetric(descCPUCores, prometheus.GaugeValue, sr.rate/100, labels...)
		}
		ch <- prometheus.MustNewConstMetric(descCPUSeconds, prometheus.CounterValue, sr.sample.cpu, labels...)
		for name, v := range sr.sample.gauges {
			ch <- prometheus.MustNewConstMetric(gaugeDescs[name], prometheus.GaugeValue, v, labels...)
		}
		for phase, n := range sr.sample.podPhase {
			ch <- prometheus.MustNewConstMetric(descPods, prometheus.GaugeValue, n, append(labels, phase)...)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Usage is an instance's figures as of the last pass; a figure that is not known (no two fresh
// samples for CPU, no fresh sample for memory) is nil.
type Usage struct {
	Fleet, Instance string
	// CPUCores is the CPU used between the last two scrapes, in cores.
	CPUCores *float64
	// MemoryBytes is the working set at the last scrape.
	MemoryBytes *float64
}

// Usage returns the figures of every instance scraped, sorted by fleet and instance.
func (s *Scraper) Usage() []Usage {
	now := s.opts.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Usage, 0, len(s.series))
	for k, sr := range s.series {
		u := Usage{Fleet: k.fleet, Instance: k.instance}
		if !sr.at.IsZero() && !s.stale(sr.at, now) {
			if sr.hasRate {
				cores := sr.rate / 100
				u.CPUCores = &cores
			}
			if mem, ok := sr.sample.gauges[memoryMetric]; ok {
				u.MemoryBytes = &mem
			}
		}
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Fleet != out[j].Fleet {
			return out[i].Fleet < out[j].Fleet
		}
		return out[i].Instance < out[j].Instance
	})
	return out
}
