package cpmetrics

import (
	"errors"
	"testing"
	"time"

	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/promtest"
)

func TestDecisions(t *testing.T) {
	d := NewDecisions()
	d.ProviderCall("local", "create", 2*time.Second, nil)
	d.ProviderCall("local", "create", 3*time.Second, errors.New("boom"))
	d.ProviderCall("local", "list", time.Millisecond, nil)
	d.Event("Normal", "ScaledOut")
	d.Event("Normal", "ScaledOut")
	d.Event("Warning", "HealingBackoff")
	cfg := autoscaler.Config{Metric: autoscaler.RequestsPerSecond, Target: 50}
	d.Decided("web", cfg, autoscaler.Sample{Value: 210, Desired: 2}, autoscaler.Decision{Desired: 5})
	d.Decided("api", autoscaler.Config{Metric: autoscaler.CPU, Target: 60}, autoscaler.Sample{Value: 30}, autoscaler.Decision{Desired: 1})
	promtest.Want(t, promtest.Gather(t, d), map[string]map[string]float64{
		"herd_provider_call_duration_seconds":  {"op=create,provider=local": 2, "op=list,provider=local": 1},
		"herd_provider_call_errors_total":      {"op=create,provider=local": 1},
		"herd_events_total":                    {"reason=ScaledOut,type=Normal": 2, "reason=HealingBackoff,type=Warning": 1},
		"herd_autoscaler_input":                {"fleet=web,metric=requestsPerSecond": 210, "fleet=api,metric=cpu": 30},
		"herd_autoscaler_target":               {"fleet=web,metric=requestsPerSecond": 50},
		"herd_autoscaler_recommended_replicas": {"fleet=web": 5, "fleet=api": 1},
	})

	// A fleet no longer autoscaled leaves no stale gauges; the others stay.
	d.Forgotten("web")
	got := promtest.Gather(t, d)
	for _, family := range []string{"herd_autoscaler_input", "herd_autoscaler_target", "herd_autoscaler_recommended_replicas"} {
		for labels := range got[family] {
			if labels == "fleet=web" || labels == "fleet=web,metric=requestsPerSecond" {
				t.Errorf("%s{%s} is still there after Forgotten(web)", family, labels)
			}
		}
	}
	promtest.Want(t, got, map[string]map[string]float64{"herd_autoscaler_recommended_replicas": {"fleet=api": 1}})
}

// The orphan collector's findings are a gauge per provider, set by each pass; its deletions a
// counter.
func TestOrphanMetrics(t *testing.T) {
	d := NewDecisions()
	d.OrphansFound("local", 3)
	d.OrphansFound("fake", 0)
	d.OrphanDeleted("local")
	d.OrphanDeleted("local")
	d.OrphansFound("local", 1)
	promtest.Want(t, promtest.Gather(t, d), map[string]map[string]float64{
		"herd_orphans":               {"provider=local": 1, "provider=fake": 0},
		"herd_orphans_deleted_total": {"provider=local": 2},
	})
}
