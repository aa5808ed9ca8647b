package regionlb

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbsync"
	"herd.dev/herd/internal/lbsync/lbsynctest"
)

// A region's load balancer gets the host router of its fleets' discovery names on port 80 of
// every address; a fleet listener on port 80 leaves
// the router out, the fleets' listeners in, and the log names the flag.
func TestRegionalDiscoveryRouter(t *testing.T) {
	var logs strings.Builder
	r := New(Options{Discovery: lbsync.Discovery{Zone: "herd.internal.", Port: 80}, Logger: slogTo(&logs)})
	p := lbsynctest.NewProvider(t, nil)
	route := lb.HostRoute{Host: "api.herd.internal", Listener: "api/http"}
	api := lb.Listener{Name: "api/http", Fleet: "api", Address: ":8081"}
	w := &regionWant{prov: p, routes: []lb.HostRoute{route}, cfg: lb.Config{Listeners: []lb.Listener{api}}}
	r.addRouter("eu", w)
	if n := len(w.cfg.Listeners); n != 2 || w.cfg.Listeners[1].Address != ":80" || len(w.cfg.Listeners[1].Routes) != 1 || w.cfg.Listeners[1].Routes[0] != route {
		t.Fatalf("listeners %+v, want api's and a router on :80 routing %+v", w.cfg.Listeners, route)
	}
	if err := w.cfg.WithDefaults().Validate(); err != nil {
		t.Fatalf("the region's config with its router: %v", err)
	}

	web := lb.Listener{Name: "web/http", Fleet: "web", Address: ":80"}
	w = &regionWant{prov: p, routes: []lb.HostRoute{route}, cfg: lb.Config{Listeners: []lb.Listener{api, web}}}
	r.addRouter("eu", w)
	if n := len(w.cfg.Listeners); n != 2 || !strings.Contains(logs.String(), lbsync.PortFlag) || !strings.Contains(logs.String(), "web/http") {
		t.Fatalf("with web on port 80: %d listeners, log %q; want the fleets' two and an error naming web's listener and %s", n, logs.String(), lbsync.PortFlag)
	}
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
