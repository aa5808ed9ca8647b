package agentmetrics

import (
	"testing"

	"herd.dev/herd/internal/promtest"
)

// The instances' labels as promtest sorts them, with a phase for herd_instance_pods.
const (
	i0 = "fleet=a,instance=i0,region=r1,revision=a-1"
	i1 = "fleet=b,instance=i1,region=r1,revision=b-1"
)

func pods(instance, phase string) string {
	return map[string]string{i0: "fleet=a,instance=i0,phase=" + phase + ",region=r1,revision=a-1",
		i1: "fleet=b,instance=i1,phase=" + phase + ",region=r1,revision=b-1"}[instance]
}

// wantAbsent reports the samples (family -> labels) that got has.
func wantAbsent(t *testing.T, got map[string]map[string]float64, absent map[string]string) {
	t.Helper()
	for family, l := range absent {
		if v, ok := got[family][l]; ok {
			t.Errorf("%s{%s} = %v, want no such sample", family, l, v)
		}
	}
}

func TestCollectorRelabelsTheAgentsFigures(t *testing.T) {
	e := newEnv(t, "a", "b")
	e.passAt(10, 20)
	got := promtest.Gather(t, e.s.Collector())
	// One scrape: every figure but the CPU rate.
	promtest.Want(t, got, map[string]map[string]float64{
		"herd_instance_agent_up":          {i0: 1, i1: 1},
		"herd_instance_cpu_seconds_total": {i0: 10, i1: 20},
		"herd_instance_memory_bytes":      {i0: fakeMemory, i1: fakeMemory},
		"herd_instance_pods":              {pods(i0, "Running"): 3, pods(i0, "Pending"): 0},
		"herd_instance_workload_ready":    {i1: 1},
	})
	wantAbsent(t, got, map[string]string{"herd_instance_cpu_cores": i0})

	e.passAt(11, 24)
	e.agents[1].setMode(mode500)
	e.passAt(12, 0)
	promtest.Want(t, promtest.Gather(t, e.s.Collector()), map[string]map[string]float64{
		"herd_instance_agent_up":     {i0: 1, i1: 0},
		"herd_instance_cpu_cores":    {i0: 0.5, i1: 2}, // i1's from its last good scrapes, still fresh
		"herd_instance_memory_bytes": {i1: fakeMemory},
	})
	usage := e.s.Usage()
	if len(usage) != 2 || usage[1].Instance != "i1" || usage[1].CPUCores == nil || *usage[1].CPUCores != 2 ||
		usage[0].MemoryBytes == nil || *usage[0].MemoryBytes != fakeMemory {
		t.Errorf("Usage = %+v, want i0 and i1 with i1 at 2 cores and i0 at %d bytes", usage, fakeMemory)
	}

	// Failures past the staleness leave only agent_up, which says why the figures are gone.
	for range staleIntervals {
		e.passAt(13, 0)
	}
	got = promtest.Gather(t, e.s.Collector())
	promtest.Want(t, got, map[string]map[string]float64{"herd_instance_agent_up": {i1: 0}})
	wantAbsent(t, got, map[string]string{"herd_instance_cpu_cores": i1, "herd_instance_memory_bytes": i1,
		"herd_instance_pods": pods(i1, "Running")})
	if u := e.s.Usage(); u[1].CPUCores != nil || u[1].MemoryBytes != nil {
		t.Errorf("Usage of the unreachable i1 = %+v, want no figures", u[1])
	}
}

func TestNeverReachedInstanceIsDown(t *testing.T) {
	e := newEnv(t, "a")
	e.agents[0].setMode(modeGarbage)
	e.passAt(0)
	got := promtest.Gather(t, e.s.Collector())
	promtest.Want(t, got, map[string]map[string]float64{"herd_instance_agent_up": {i0: 0}})
	if len(got) != 1 {
		t.Errorf("samples of an instance never reached: %v, want agent_up alone", got)
	}
}
