package apiserver

import (
	"net/http"
	"time"
)

// ClientRTT is the round trip from one client network to one region, as the region's own load
// balancer measured it on its clients' connections (GET /v1/rtt).
type ClientRTT struct {
	// Network is the client network: a /24 (IPv4) or /48 (IPv6).
	Network string `json:"network"`
	Region  string `json:"region"`
	// SRTTms is the moving average of the kernel's smoothed RTT, in milliseconds.
	SRTTms   float64   `json:"srtt_ms"`
	Samples  uint64    `json:"samples"`
	LastSeen time.Time `json:"last_seen"`
}

// FrontDoor is the global front door as the control plane last configured it (GET /v1/front).
type FrontDoor struct {
	// Address is where clients reach it; "" while none runs.
	Address   string          `json:"address,omitempty"`
	Listeners []FrontListener `json:"listeners"`
	// Synced is true when it runs the configuration the store gives it; Error says why not.
	Synced bool   `json:"synced"`
	Error  string `json:"error,omitempty"`
	// Regions are the regions behind its listeners as the front door itself sees them now.
	Regions []FrontRegion `json:"regions,omitempty"`
}

// FrontRegion is one region behind a listener of the front door, by the front door's own checks.
type FrontRegion struct {
	// Listener is the front door's listener, "<fleet>/<listener>".
	Listener string `json:"listener"`
	Region   string `json:"region"`
	// State is the front door's: healthy, unhealthy, ejected or unknown (not checked yet).
	State string `json:"state"`
	// RTTms is the round trip its checks measure to the region's load balancer; 0 until measured.
	RTTms     float64 `json:"rtt_ms,omitempty"`
	LastError string  `json:"lastError,omitempty"`
}

// FrontListener is one listener of the front door: a fleet's listener, served by its regions.
type FrontListener struct {
	Name  string `json:"name"`
	Fleet string `json:"fleet"`
	Port  int    `json:"port"`
	// Regions are the regions behind it, in the fleet's order.
	Regions []string `json:"regions"`
}

// routeGlobal serves what the control plane knows of routing users to regions.
func (s *Server) routeGlobal() {
	s.mux.HandleFunc("GET /v1/rtt", func(w http.ResponseWriter, r *http.Request) {
		out := []ClientRTT{}
		if s.opts.ClientRTTs != nil {
			out = append(out, s.opts.ClientRTTs()...)
		}
		writeJSON(w, http.StatusOK, out)
	})
	s.mux.HandleFunc("GET /v1/front", func(w http.ResponseWriter, r *http.Request) {
		out := FrontDoor{Listeners: []FrontListener{}}
		if s.opts.Front != nil {
			out = s.opts.Front()
		}
		writeJSON(w, http.StatusOK, out)
	})
}
