package agent

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// handler serves the agent's endpoints, to requests that carry the instance's credential only
// (Run wraps it in agentauth.Require):
//
//	GET /readyz   200 "ok" when the node is Ready and every baked workload is available,
//	              else 503 with the reason
//	GET /livez    200 "ok" while the agent runs
//	GET /metrics  Prometheus text: the instance's CPU and memory, pods by phase, restarts
func (a *agent) handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		l := a.live.Load()
		if l.ready {
			fmt.Fprintln(w, "ok")
			return
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, l.reason)
	})
	mux.HandleFunc("GET /livez", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
