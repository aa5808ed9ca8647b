// Package cpmetrics exposes the control plane's own state to Prometheus: the controller's work,
// through its exported counters, and the fleets and instances it keeps, read from the store at
// scrape time, each instance with its phase and the load balancer's view of it. herd up registers it, with the load balancer's collector, in the registry it
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
	descReplicas = prometheus.NewDesc("herd_fleet_replicas",
		"A fleet's bounds and desired count of instances (spec.replicas), by bound: min, max, desired.",
		[]string{"fleet", "bound"}, nil)
	descRollout = prometheus.NewDesc("herd_fleet_rollout",
		"1 for a fleet's latest BlueGreen or Canary rollout, with its revision, strategy and phase (Progressing, Paused, Succeeded, RolledBack, Failed).",
		[]string{"fleet", "revision", "strategy", "phase"}, nil)
	descCondition = prometheus.NewDesc("herd_fleet_condition",
		"1 for each of a fleet's conditions (Ready, Available, Progressing, LoadBalancerReady, Degraded), with its status.",
		[]string{"fleet", "condition", "status"}, nil)

	instanceLabels = []string{"fleet", "region", "revision", "instance"}
	descPhase      = prometheus.NewDesc("herd_instance_phase",
		"1 for each instance, with its phase (Pending, Booting, Ready, Unhealthy, Terminating, Failed).",
		append(instanceLabels, "phase"), nil)
	descLBState = prometheus.NewDesc("herd_instance_lb_state",
		"1 for each instance the load balancer has, with its worst state over the fleet's listeners (healthy, unknown, draining, unhealthy, ejected).",
		append(instanceLabels, "state"), nil)
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
	ctrl     Controller
	store    store.Store
	lbHealth func() map[string]string
}

// New returns a collector of the controller's counters and of the fleets and instances in st;
// lbHealth, if set, gives the load balancer's state of each instance by name.
func New(ctrl Controller, st store.Store, lbHealth func() map[string]string) prometheus.Collector {
	return collector{ctrl: ctrl, store: st, lbHealth: lbHealth}
}

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReconciles, descErrors, descSynced, descFleets, descInstances,
		descReplicas, descRollout, descCondition, descPhase, descLBState} {
		ch <- d
	}
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
		collectFleet(ch, f)
	}
	for phase, n := range byPhase {
		ch <- prometheus.MustNewConstMetric(descFleets, prometheus.GaugeValue, float64(n), phase)
	}
	insts, _, err := store.ListObjects[v1alpha1.Instance](ctx, c.store, store.Instances)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descInstances, fmt.Errorf("list instances: %w", err))
		return
	}
	var health map[string]string
	if c.lbHealth != nil {
		health = c.lbHealth()
	}
	for _, in := range insts {
		// Instances of a deleted fleet stay until they are gone: they are counted too.
		if perFleet[in.Spec.Fleet] == nil {
			perFleet[in.Spec.Fleet] = map[v1alpha1.InstancePhase]int{}
		}
		perFleet[in.Spec.Fleet][in.Status.Phase]++
		labels := []string{in.Spec.Fleet, in.Spec.Region, in.Spec.Revision, in.Metadata.Name}
		ch <- prometheus.MustNewConstMetric(descPhase, prometheus.GaugeValue, 1, append(labels, string(in.Status.Phase))...)
		if state, ok := health[in.Metadata.Name]; ok {
			ch <- prometheus.MustNewConstMetric(descLBState, prometheus.GaugeValue, 1, append(labels, state)...)
		}
	}
	for fleet, counts := range perFleet {
		for _, phase := range Phases {
			ch <- prometheus.MustNewConstMetric(descInstances, prometheus.GaugeValue, float64(counts[phase]), fleet, string(phase))
		}
	}
}

// collectFleet sends a fleet's replica bounds, latest rollout and conditions.
func collectFleet(ch chan<- prometheus.Metric, f *v1alpha1.Fleet) {
	name := f.Metadata.Name
	for bound, v := range map[string]*int32{"min": f.Spec.Replicas.Min, "max": f.Spec.Replicas.Max, "desired": f.Spec.Replicas.Desired} {
		if v != nil {
			ch <- prometheus.MustNewConstMetric(descReplicas, prometheus.GaugeValue, float64(*v), name, bound)
		}
	}
	if ro := f.Status.Rollout; ro != nil {
		ch <- prometheus.MustNewConstMetric(descRollout, prometheus.GaugeValue, 1, name, ro.Revision, string(ro.Strategy), ro.Phase)
	}
	for _, cond := range f.Status.Conditions {
		ch <- prometheus.MustNewConstMetric(descCondition, prometheus.GaugeValue, 1, name, cond.Type, string(cond.Status))
	}
}
