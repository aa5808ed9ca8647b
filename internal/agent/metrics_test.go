package agent

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestKeyedValue(t *testing.T) {
	stat := []byte("cache 100\ntotal_inactive_file 4096\ntotal_rss 8192\n")
	if v, ok := keyedValue(stat, "total_inactive_file"); !ok || v != 4096 {
		t.Errorf("total_inactive_file = %d, %v", v, ok)
	}
	if _, ok := keyedValue(stat, "missing"); ok {
		t.Error("found a missing key")
	}
	meminfo := []byte("MemTotal:       24684544 kB\nMemFree:        19554304 kB\nMemAvailable:   24113152 kB\n")
	if v, ok := keyedValue(meminfo, "MemAvailable:"); !ok || v != 24113152 {
		t.Errorf("MemAvailable = %d, %v", v, ok)
	}
}

func TestProcStatBusySeconds(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	data := []byte("cpu  1000 50 300 9000 200 10 20 5 400 0\ncpu0 1 2 3 4 5 6 7 8 9 0\n")
	got, ok := procStatBusySeconds(data)
	if !ok || got != (1000+50+300+10+20)/100.0 { // steal and guest are left out
		t.Errorf("busy = %v, %v", got, ok)
	}
	if _, ok := procStatBusySeconds([]byte("intr 1 2 3\n")); ok {
		t.Error("parsed a file without a cpu line")
	}
}

func TestPodCounts(t *testing.T) {
	pod := func(phase string, restarts ...int64) unstructured.Unstructured {
		var cs []any
		for _, r := range restarts {
			cs = append(cs, map[string]any{"name": "c", "restartCount": r})
		}
		st := map[string]any{"containerStatuses": cs}
		if phase != "" {
			st["phase"] = phase
		}
		return unstructured.Unstructured{Object: map[string]any{"status": st}}
	}
	phases, restarts := podCounts([]unstructured.Unstructured{pod("Running", 1, 2), pod("Running"), pod("", 0), pod("Failed", 4)})
	if phases["Running"] != 2 || phases["Pending"] != 1 || phases["Failed"] != 1 || restarts != 7 {
		t.Errorf("phases = %v, restarts = %d", phases, restarts)
	}
}

func TestContainersRunning(t *testing.T) {
	pod := func(states ...map[string]any) unstructured.Unstructured {
		var cs []any
		for _, s := range states {
			cs = append(cs, map[string]any{"name": "c", "state": s})
		}
		return unstructured.Unstructured{Object: map[string]any{"status": map[string]any{"containerStatuses": cs}}}
	}
	running := map[string]any{"running": map[string]any{"startedAt": "2025-01-01T00:00:00Z"}}
	terminated := map[string]any{"terminated": map[string]any{"exitCode": int64(0)}}
	waiting := map[string]any{"waiting": map[string]any{"reason": "ContainerCreating"}}
	if !containersRunning(pod(terminated, running)) {
		t.Error("a running container was not seen")
	}
	if containersRunning(pod(terminated, waiting)) || containersRunning(pod()) {
		t.Error("a pod without running containers was seen running")
	}
}
