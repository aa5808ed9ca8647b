package apiserver

import (
	"errors"
	"fmt"
	"net/http"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// UsageReport is the answer of GET /v1/usage: what each fleet and instance uses and serves now,
// for herd top. Figures are nil when they are not known yet: CPU needs two scrapes of the
// instance's agent, the rates two samples of the load balancer's counters.
type UsageReport struct {
	// WindowSeconds is the span the rates cover (0 while there is only one sample).
	WindowSeconds float64         `json:"windowSeconds"`
	Fleets        []FleetUsage    `json:"fleets"`
	Instances     []InstanceUsage `json:"instances"`
}

// Usage are the figures of a fleet or an instance.
type Usage struct {
	// CPUCores is the CPU used, in cores, between the last two scrapes of the agents.
	CPUCores *float64 `json:"cpuCores,omitempty"`
	// MemoryBytes is the working set at the last scrape of the agents.
	MemoryBytes *float64 `json:"memoryBytes,omitempty"`
	// RequestsPerSecond counts the requests the load balancer finished over the window.
	RequestsPerSecond *float64 `json:"requestsPerSecond,omitempty"`
	// LatencyP95Seconds is the 95th percentile of those requests' latency.
	LatencyP95Seconds *float64 `json:"latencyP95Seconds,omitempty"`
	// Errors5xxPerSecond counts those answered 5xx or not at all.
	Errors5xxPerSecond *float64 `json:"errors5xxPerSecond,omitempty"`
}

// FleetUsage sums a fleet's instances (CPU, memory) and its load balancer listeners (rates,
// latency, requests no instance took included).
type FleetUsage struct {
	Fleet string `json:"fleet"`
	// Instances counts the fleet's instances in the report.
	Instances int `json:"instances"`
	Usage
}

// InstanceUsage is one instance's figures, with what names it.
type InstanceUsage struct {
	Fleet    string                 `json:"fleet"`
	Region   string                 `json:"region"`
	Revision string                 `json:"revision"`
	Instance string                 `json:"instance"`
	Phase    v1alpha1.InstancePhase `json:"phase"`
	Usage
}

// getUsage reports the usage of every instance, or of one fleet's with ?fleet=NAME.
func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) {
	if s.opts.Usage == nil {
		s.fail(w, r, http.StatusNotImplemented, errors.New("this control plane does not report usage"))
		return
	}
	fleet := r.URL.Query().Get("fleet")
	if fleet != "" {
		if _, err := store.GetObject[v1alpha1.Fleet](r.Context(), s.opts.Store, store.Fleets, fleet); err != nil {
			s.storeError(w, r, fmt.Sprintf("fleet %q", fleet), err)
			return
		}
	}
	insts, _, err := store.ListObjects[v1alpha1.Instance](r.Context(), s.opts.Store, store.Instances)
	if err != nil {
		s.storeError(w, r, "instances", err)
		return
	}
	out := insts[:0]
	for _, in := range insts {
		if fleet == "" || in.Spec.Fleet == fleet {
			out = append(out, in)
		}
	}
	writeJSON(w, http.StatusOK, s.opts.Usage(out))
}
