// Package front is herd's global front door (the role of AWS Global Accelerator or Google's global
// load balancer): one address that proxies HTTP and TCP to the regional load balancers, each request
// to the nearest healthy region, an idempotent request whose region fails before answering retried
// once on the next nearest.
//
// The front door is the load balancer of internal/lb, in a mode: a listener whose target groups are
// regions (one target each, the regional load balancer's data address), chosen per request by
// lb.GroupNearest. The distance to a region is the kernel's smoothed round-trip time of the front's
// active health-check connections to it, so every region is measured on every check interval,
// whether it gets traffic or not. Config builds that listener with the settings a front door needs;
// `herd front` runs it, configured over the same admin API as `herd lb`. Sync is what configures
// it in herd up: the listeners of the fleets served regionally, derived from the store.
package front

import (
	"time"

	"herd.dev/herd/internal/lb"
)

// Region is one region behind the front door.
type Region struct {
	// Name names the region; it is the name of its target group and of its target. Required.
	Name string `json:"name"`
	// Address is the host:port of the region's load balancer listener. Required.
	Address string `json:"address"`
}

// Listener is one address of the front door and the regions that serve it.
type Listener struct {
	// Name identifies the listener, conventionally "fleet/listener". Required.
	Name string `json:"name"`
	// Fleet is the fleet served; it labels metrics. Required.
	Fleet string `json:"fleet"`
	// Address is the host:port the front door binds. Required.
	Address string `json:"address"`
	// Protocol is lb.ProtocolHTTP (default: each request to the nearest healthy region) or
	// lb.ProtocolTCP (each connection to the region nearest when it opens).
	Protocol lb.Protocol `json:"protocol,omitempty"`
	// HealthPath is the HTTP path the front door checks on each region's load balancer; a 2xx or
	// 3xx answer passes, so a region whose load balancer has no healthy instance (503) is out.
	// Default "": a TCP connect.
	HealthPath string `json:"healthPath,omitempty"`
	// Regions serve the listener; their order breaks ties before any round trip is measured.
	Regions []Region `json:"regions"`
}

// Front door settings (every one can be changed in the lb.Config that Config returns).
const (
	// CheckInterval is how often each region is checked: a region that stops answering is out
	// within about two intervals (UnhealthyThreshold), and its requests in flight are retried then.
	CheckInterval = 500 * time.Millisecond
	// ConnectTimeout bounds a connection to a region; a region that does not accept within it is
	// skipped for the next one. It must stay well above the farthest region's round trip.
	ConnectTimeout = time.Second
)

// Config returns the load balancer config of a front door serving listeners.
func Config(listeners ...Listener) lb.Config {
	cfg := lb.Config{Listeners: make([]lb.Listener, 0, len(listeners))}
	for _, fl := range listeners {
		l := lb.Listener{
			Name: fl.Name, Fleet: fl.Fleet, Address: fl.Address, Protocol: fl.Protocol,
			GroupPolicy: lb.GroupNearest,
			HealthCheck: lb.HealthCheck{
				Path:               fl.HealthPath,
				Interval:           lb.Duration(CheckInterval),
				Timeout:            lb.Duration(CheckInterval),
				HealthyThreshold:   2,
				UnhealthyThreshold: 2,
				// Requests stuck in a region that stopped answering are retried on the next one as
				// soon as the checks say so, instead of waiting out the response timeout.
				CloseOnUnhealthy: true,
			},
			// Every request may be retried once: losing a region must cost no idempotent request,
			// and the retries go to other regions, which have the capacity for them.
			Retry:    lb.Retry{Budget: 1, MinPerSecond: 1000},
			Timeouts: lb.Timeouts{Connect: lb.Duration(ConnectTimeout)},
		}
		for _, r := range fl.Regions {
			l.Groups = append(l.Groups, lb.TargetGroup{Name: r.Name, Targets: []lb.Target{{ID: r.Name, Address: r.Address}}})
		}
		cfg.Listeners = append(cfg.Listeners, l)
	}
	return cfg
}
