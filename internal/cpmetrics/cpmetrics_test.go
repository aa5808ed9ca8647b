package cpmetrics

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"herd.dev/herd/api/v1alpha1"
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
	op, err := store.PutOp(kind, obj)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn(context.Background(), op); err != nil {
		t.Fatal(err)
	}
}

// filledStore holds fleets web (Ready, two Ready instances and one Booting) and new (not
// reconciled yet), and an instance of a deleted fleet old.
func filledStore(t *testing.T) store.Store {
	st := memory.New()
	web := &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: "web"}}
	web.Status.Phase = "Ready"
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
		i.Spec.Fleet, i.Status.Phase = in.fleet, in.phase
		put(t, st, store.Instances, i)
	}
	return st
}

// gather returns each metric family's samples as "labels=value" strings.
func gather(t *testing.T, c prometheus.Collector) map[string]map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		samples := map[string]float64{}
		for _, m := range mf.GetMetric() {
			samples[labels(m)] = value(m)
		}
		out[mf.GetName()] = samples
	}
	return out
}

func labels(m *dto.Metric) string {
	var ls []string
	for _, l := range m.GetLabel() {
		ls = append(ls, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(ls, ",")
}

// value is a counter's or gauge's value, or a histogram's count of observations.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return m.Gauge.GetValue()
}

func TestCollectorReportsTheControllerAndTheStore(t *testing.T) {
	got := gather(t, New(fakeController{reconciles: 42, errors: 3, synced: true}, filledStore(t)))
	want := map[string]map[string]float64{
		"herd_controller_reconciles_total":       {"": 42},
		"herd_controller_reconcile_errors_total": {"": 3},
		"herd_controller_synced":                 {"": 1},
		"herd_fleets":                            {"phase=Ready": 1, "phase=Pending": 1},
	}
	for family, samples := range want {
		for l, v := range samples {
			if g, ok := got[family][l]; !ok || g != v {
				t.Errorf("%s{%s} = %v (present %v), want %v", family, l, g, ok, v)
			}
		}
	}
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
	h := Handler(slog.New(slog.DiscardHandler), New(fakeController{reconciles: 7}, filledStore(t)))
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{"herd_controller_reconciles_total 7", `herd_instances{fleet="web",phase="Ready"} 2`, "go_goroutines", "process_"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}
