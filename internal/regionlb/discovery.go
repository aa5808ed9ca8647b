package regionlb

import (
	"herd.dev/herd/internal/lbsync"
)

// addRouter adds to w the host router of the discovery names of the region's fleets (Options.
// Discovery), bound on every address of the load balancer, as the fleets' listeners are: the
// address the names resolve to (the instances' side of the region's network) among them. One
// address that never changes: a load balancer cannot move a socket from every address to one
// of them on the same port without a moment with neither. When a fleet's listener has the port
// already, the names alone are not served in the region, and the log says why when that changes.
func (r *Regional) addRouter(region string, w *regionWant) {
	routers, err := lbsync.Routers(w.routes, []string{""}, r.opts.Discovery.Port, w.cfg.Listeners)
	w.cfg.Listeners = append(w.cfg.Listeners, routers...)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.routersErr == nil {
		r.routersErr = map[string]string{}
	}
	if r.routersErr[region] != msg {
		r.routersErr[region] = msg
		if err != nil {
			r.log.Error("discovery names on the standard port", "region", region, "err", err)
		}
	}
}
