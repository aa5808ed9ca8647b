// Package cpmetrics exposes the control plane's own state to Prometheus: the controller's work,
// through its exported counters, and the fleets and instances it keeps, read from the store at
// scrape time. herd up registers it, with the load balancer's collector, in the registry it
// serves at /metrics.
package cpmetrics

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// Controller is what the collector reads of the controller.
type Controller interface {
	// Reconciles counts reconciles done.
	Reconciles() int64
	// ReconcileErrors counts reconciles that failed.
	ReconcileErrors() int64
	// Synced reports whether every fleet has been reconciled once since start.
	Synced() bool
}

// Phases are the instance phases herd_instances reports, zero included.
var Phases = []v1alpha1.InstancePhase{
	v1alpha1.PhasePending, v1alpha1.PhaseBooting, v1alpha1.PhaseReady,
	v1alpha1.PhaseUnhealthy, v1alpha1.PhaseTerminating, v1alpha1.PhaseFailed,
}

// readTimeout bounds the store reads of one scrape.
const readTimeout = 5 * time.Second

var (
	descReconciles = prometheus.NewDesc("herd_controller_reconciles_total",
		"Fleet reconciles done by the controller, failed ones included.", nil, nil)
	descErrors = prometheus.NewDesc("herd_controller_reconcile_errors_total",
		"Fleet reconciles that failed (and were retried).", nil, nil)
	descSynced = prometheus.NewDesc("herd_controller_synced",
		"1 once the controller has loaded its state and reconciled every fleet once, else 0.", nil, nil)
	descFleets = prometheus.NewDesc("herd_fleets",
		"Fleets in the store, by phase (Pending, Scaling, Ready, Degraded, Deleting).", []string{"phase"}, nil)
	descInstances = prometheus.NewDesc("herd_instances",
		"Instance records in the store, by fleet and phase.", []string{"fleet", "phase"}, nil)
)

// Handler serves the collectors, with the Go runtime's and the process's metrics, in the Prometheus
// exposition format; a collector that fails is logged and fails the scrape.
func Handler(log *slog.Logger, cs ...prometheus.Collector) http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(cs...)
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorLog: slog.NewLogLogger(log.With("component", "metrics").Handler(), slog.LevelWarn),
	})
}

// collector implements prometheus.Collector.
type collector struct {
	ctrl  Controller
	store store.Store
}

// New returns a collector of the controller's counters and of the fleets and instances in st.
func New(ctrl Controller, st store.Store) prometheus.Collector {
	return collector{ctrl: ctrl, store: st}
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descReconciles
	ch <- descErrors
	ch <- descSynced
	ch <- descFleets
	ch <- descInstances
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descReconciles, prometheus.CounterValue, float64(c.ctrl.Reconciles()))
	ch <- prometheus.MustNewConstMetric(descErrors, prometheus.CounterValue, float64(c.ctrl.ReconcileErrors()))
	synced := 0.0
	if c.ctrl.Synced() {
		synced = 1
	}
	ch <- prometheus.MustNewConstMetric(descSynced, prometheus.GaugeValue, synced)

	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](ctx, c.store, store.Fleets)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descFleets, fmt.Errorf("list fleets: %w", err))
		return
	}
	byPhase := map[string]int{}
	perFleet := map[string]map[v1alpha1.InstancePhase]int{}
	for _, f := range fleets {
		phase := f.Status.Phase
		if phase == "" {
			phase = "Pending" // not reconciled yet
		}
		byPhase[phase]++
		perFleet[f.Metadata.Name] = map[v1alpha1.InstancePhase]int{}
	}
	for phase, n := range byPhase {
		ch <- prometheus.MustNewConstMetric(descFleets, prometheus.GaugeValue, float64(n), phase)
	}
	insts, _, err := store.ListObjects[v1alpha1.Instance](ctx, c.store, store.Instances)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descInstances, fmt.Errorf("list instances: %w", err))
		return
	}
	for _, in := range insts {
		// Instances of a deleted fleet stay until they are gone: they are counted too.
		if perFleet[in.Spec.Fleet] == nil {
			perFleet[in.Spec.Fleet] = map[v1alpha1.InstancePhase]int{}
		}
		perFleet[in.Spec.Fleet][in.Status.Phase]++
	}
	for fleet, counts := range perFleet {
		for _, phase := range Phases {
			ch <- prometheus.MustNewConstMetric(descInstances, prometheus.GaugeValue, float64(counts[phase]), fleet, string(phase))
		}
	}
}
