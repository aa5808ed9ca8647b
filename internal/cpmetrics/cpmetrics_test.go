package cpmetrics

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/promtest"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

type fakeController struct {
	reconciles, errors int64
	synced             bool
}

func (c fakeController) Reconciles() int64      { return c.reconciles }
func (c fakeController) ReconcileErrors() int64 { return c.errors }
func (c fakeController) Synced() bool           { return c.synced }

func put(t *testing.T, st store.Store, kind string, obj store.Object) {
	t.Helper()
	if err := store.PutObject(context.Background(), st, kind, obj); err != nil {
		t.Fatal(err)
	}
}

// filledStore holds fleets web (Ready, two Ready instances and one Booting) and new (not
// reconciled yet), and an instance of a deleted fleet old.
func filledStore(t *testing.T) store.Store {
	st := memory.New()
	web := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}}
	web.Status.Phase = "Ready"
	two, three := int32(2), int32(3)
	web.Spec.Replicas = v1alpha1.Replicas{Min: &two, Desired: &three}
	web.Status.Rollout = &v1alpha1.RolloutStatus{Revision: "web-2", Strategy: v1alpha1.StrategyCanary, Phase: v1alpha1.RolloutProgressing}
	web.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: "RollingOut"}}
	put(t, st, store.Fleets, web)
	put(t, st, store.Fleets, &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "new"}})
	for name, in := range map[string]struct {
		fleet string
		phase v1alpha1.InstancePhase
	}{
		"web-a": {"web", v1alpha1.PhaseReady}, "web-b": {"web", v1alpha1.PhaseReady},
		"web-c": {"web", v1alpha1.PhaseBooting}, "old-a": {"old", v1alpha1.PhaseTerminating},
	} {
		i := &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name}}
		i.Spec.Fleet, i.Spec.Region, i.Spec.Revision, i.Status.Phase = in.fleet, "r1", in.fleet+"-1", in.phase
		put(t, st, store.Instances, i)
	}
	return st
}

func TestCollectorReportsTheControllerAndTheStore(t *testing.T) {
	got := promtest.Gather(t, New(fakeController{reconciles: 42, errors: 3, synced: true}, filledStore(t), nil))
	want := map[string]map[string]float64{
		"herd_controller_reconciles_total":       {"": 42},
		"herd_controller_reconcile_errors_total": {"": 3},
		"herd_controller_synced":                 {"": 1},
		"herd_fleets":                            {"phase=Ready": 1, "phase=Pending": 1},
	}
	promtest.Want(t, got, want)
	inst := got["herd_instances"]
	for l, v := range map[string]float64{
		"fleet=web,phase=Ready": 2, "fleet=web,phase=Booting": 1, "fleet=web,phase=Failed": 0,
		"fleet=new,phase=Ready": 0, "fleet=old,phase=Terminating": 1,
	} {
		if g, ok := inst[l]; !ok || g != v {
			t.Errorf("herd_instances{%s} = %v (present %v), want %v", l, g, ok, v)
		}
	}
	if n := len(inst); n != 3*len(Phases) {
		t.Errorf("herd_instances has %d series, want every phase of 3 fleets: %v", n, inst)
	}
}

func TestHandlerServesTheExpositionFormat(t *testing.T) {
	h := Handler(slog.New(slog.DiscardHandler), New(fakeController{reconciles: 7}, filledStore(t), nil))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{"herd_controller_reconciles_total 7", `herd_instances{fleet="web",phase="Ready"} 2`, "go_goroutines", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestCollectorReportsEachInstanceAndFleet(t *testing.T) {
	health := func() map[string]string { return map[string]string{"web-a": "healthy", "web-b": "ejected"} }
	got := promtest.Gather(t, New(fakeController{}, filledStore(t), health))
	want := map[string]map[string]float64{
		"herd_instance_phase": {
			"fleet=web,instance=web-a,phase=Ready,region=r1,revision=web-1":       1,
			"fleet=web,instance=web-c,phase=Booting,region=r1,revision=web-1":     1,
			"fleet=old,instance=old-a,phase=Terminating,region=r1,revision=old-1": 1,
		},
		"herd_instance_lb_state": {
			"fleet=web,instance=web-a,region=r1,revision=web-1,state=healthy": 1,
			"fleet=web,instance=web-b,region=r1,revision=web-1,state=ejected": 1,
		},
		"herd_fleet_replicas":  {"bound=min,fleet=web": 2, "bound=desired,fleet=web": 3},
		"herd_fleet_rollout":   {"fleet=web,phase=Progressing,revision=web-2,strategy=Canary": 1},
		"herd_fleet_condition": {"condition=Ready,fleet=web,status=False": 1},
	}
	promtest.Want(t, got, want)
	for family, samples := range want {
		// One series per instance (its current phase or state) and none for what is not set.
		if len(got[family]) != len(samples) && family != "herd_instance_phase" {
			t.Errorf("%s has %d series, want %d: %v", family, len(got[family]), len(samples), got[family])
		}
	}
	if n := len(got["herd_instance_phase"]); n != 4 {
		t.Errorf("herd_instance_phase has %d series, want one per instance (4): %v", n, got["herd_instance_phase"])
	}
}
