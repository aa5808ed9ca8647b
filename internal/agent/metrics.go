package agent

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"herd.dev/herd/internal/agent/cgroups"
)

// The agent's metrics. "Node" is the instance: everything in its cgroup root (the cluster's
// components, the agent and the pods), or the whole machine when the agent has no cgroup root.
var (
	descReady    = prometheus.NewDesc("herd_agent_ready", "1 when the node is Ready and every baked workload is available.", nil, nil)
	descBoot     = prometheus.NewDesc("herd_agent_boot_seconds", "Seconds from the agent's start to Ready (0 until then).", nil, nil)
	descCPU      = prometheus.NewDesc("herd_node_cpu_seconds_total", "CPU time used by the instance's processes.", nil, nil)
	descMem      = prometheus.NewDesc("herd_node_memory_working_set_bytes", "Memory used by the instance's processes, less the inactive page cache.", nil, nil)
	descPods     = prometheus.NewDesc("herd_pods", "Pods of the instance by phase.", []string{"phase"}, nil)
	descRestarts = prometheus.NewDesc("herd_container_restarts", "Sum of the restart counts of the containers of the instance's pods.", nil, nil)
)

// podPhases are the phases always reported, so that a phase with no pod shows as 0.
var podPhases = []string{"Pending", "Running", "Succeeded", "Failed", "Unknown"}

// collector gathers the metrics at scrape time.
type collector struct{ a *agent }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReady, descBoot, descCPU, descMem, descPods, descRestarts} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	a := c.a
	ready := 0.0
	if a.live.Load().ready {
		ready = 1
	}
	ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, ready)
	ch <- prometheus.MustNewConstMetric(descBoot, prometheus.GaugeValue, a.bootSeconds())
	if cpu, ok := nodeCPUSeconds(a.hs, a.cfg.CgroupRoot); ok {
		ch <- prometheus.MustNewConstMetric(descCPU, prometheus.CounterValue, cpu)
	}
	if mem, ok := nodeMemoryBytes(a.hs, a.cfg.CgroupRoot); ok {
		ch <- prometheus.MustNewConstMetric(descMem, prometheus.GaugeValue, mem)
	}
	a.mu.Lock()
	inf := a.pods
	a.mu.Unlock()
	pods, ok := cachedPods(inf)
	if !ok {
		return
	}
	phases, restarts := podCounts(pods)
	for _, p := range podPhases {
		ch <- prometheus.MustNewConstMetric(descPods, prometheus.GaugeValue, float64(phases[p]), p)
	}
	ch <- prometheus.MustNewConstMetric(descRestarts, prometheus.GaugeValue, float64(restarts))
}

// podCounts counts pods by phase and sums their containers' restarts.
func podCounts(pods []unstructured.Unstructured) (map[string]int, int64) {
	phases := map[string]int{}
	var restarts int64
	for _, p := range pods {
		phase, _, _ := unstructured.NestedString(p.Object, "status", "phase")
		if phase == "" {
			phase = "Pending"
		}
		phases[phase]++
		for _, key := range []string{"containerStatuses", "initContainerStatuses"} {
			cs, _, _ := unstructured.NestedSlice(p.Object, "status", key)
			for _, c := range cs {
				if m, ok := c.(map[string]any); ok {
					if n, ok := m["restartCount"].(int64); ok {
						restarts += n
					}
				}
			}
		}
	}
	return phases, restarts
}

// hierarchyWith returns the v1 hierarchy carrying controller, or the v2 one.
func hierarchyWith(hs []cgroups.Hierarchy, controller string) (cgroups.Hierarchy, bool) {
	for _, h := range hs {
		if h.Has(controller) {
			return h, true
		}
	}
	for _, h := range hs {
		if h.V2 {
			return h, true
		}
	}
	return cgroups.Hierarchy{}, false
}

// nodeCPUSeconds is the CPU time of the cgroup root's subtree, or of the machine.
func nodeCPUSeconds(hs []cgroups.Hierarchy, root string) (float64, bool) {
	if root == "" || len(hs) == 0 {
		data, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, false
		}
		return procStatBusySeconds(data)
	}
	h, ok := hierarchyWith(hs, "cpuacct")
	if !ok {
		return 0, false
	}
	if h.V2 {
		data, err := os.ReadFile(filepath.Join(h.Path(root), "cpu.stat"))
		if err != nil {
			return 0, false
		}
		usec, ok := keyedValue(data, "usage_usec")
		return float64(usec) / 1e6, ok
	}
	data, err := os.ReadFile(filepath.Join(h.Path(root), "cpuacct.usage"))
	if err != nil {
		return 0, false
	}
	ns, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	return float64(ns) / 1e9, err == nil
}

// nodeMemoryBytes is the working set of the cgroup root's subtree, or of the machine.
func nodeMemoryBytes(hs []cgroups.Hierarchy, root string) (float64, bool) {
	if root == "" || len(hs) == 0 {
		data, err := os.ReadFile("/proc/meminfo")
		if err != nil {
			return 0, false
		}
		total, ok1 := keyedValue(data, "MemTotal:")
		avail, ok2 := keyedValue(data, "MemAvailable:")
		return float64(total-avail) * 1024, ok1 && ok2
	}
	h, ok := hierarchyWith(hs, "memory")
	if !ok {
		return 0, false
	}
	usageFile, inactiveKey := "memory.usage_in_bytes", "total_inactive_file"
	if h.V2 {
		usageFile, inactiveKey = "memory.current", "inactive_file"
	}
	data, err := os.ReadFile(filepath.Join(h.Path(root), usageFile))
	if err != nil {
		return 0, false
	}
	usage, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, false
	}
	if stat, err := os.ReadFile(filepath.Join(h.Path(root), "memory.stat")); err == nil {
		if inactive, ok := keyedValue(stat, inactiveKey); ok && inactive < usage {
			usage -= inactive
		}
	}
	return float64(usage), true
}

// keyedValue finds "key value" (or "key: value kB") in a flat keyed file and returns value.
func keyedValue(data []byte, key string) (uint64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == key {
			n, err := strconv.ParseUint(f[1], 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// procStatBusySeconds is the machine's non-idle CPU time from /proc/stat's "cpu" line (in
// USER_HZ ticks, 100 per second on Linux).
func procStatBusySeconds(data []byte) (float64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 || f[0] != "cpu" {
			continue
		}
		var busy uint64
		for i, v := range f[1:] {
			if i == 3 || i == 4 { // idle, iowait
				continue
			}
			if i >= 7 { // steal is not ours; guest time is already in user time
				break
			}
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return 0, false
			}
			busy += n
		}
		return float64(busy) / 100, true
	}
	return 0, false
}
