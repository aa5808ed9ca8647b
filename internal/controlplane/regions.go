package controlplane

import (
	"context"
	"log/slog"
	"math"
	"net"
	"time"

	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/global/front"
	"herd.dev/herd/internal/global/health"
	"herd.dev/herd/internal/global/rtt"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/regionlb"
	"herd.dev/herd/internal/regionnet"
)

// regionNetworks asks each provider whose regions are networks of their own for them, once:
// the regional load balancers, the front door, the regions' probes, the global routes and chaos
// reach the regions' networks through what it returns, by provider name.
func regionNetworks(providers map[string]provider.Provider) map[string]regionnet.Networks {
	out := map[string]regionnet.Networks{}
	for name, p := range providersAs[provider.RegionNetworks](providers) {
		out[name] = p.RegionNetworks()
	}
	return out
}

// regionChaos is the chaos engine's view of networks.
func regionChaos(networks map[string]regionnet.Networks) map[string]regionnet.Chaos {
	out := make(map[string]regionnet.Chaos, len(networks))
	for name, n := range networks {
		out[name] = n
	}
	return out
}

// newRegionChecker probes the regions whose load balancers regional configures, from the
// clients' side of the first provider's networks (regionnet.First); with none, it probes
// nothing. onChange hears of every region whose verdict changed.
func newRegionChecker(regional *regionlb.Regional, networks map[string]regionnet.Networks, log *slog.Logger, onChange func(region string)) (*health.Checker, error) {
	dialer := regionnet.First(networks)
	return health.New(health.Options{
		Logger:   log,
		OnChange: onChange,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			return dialer.DialFromClients(ctx, network, address)
		},
		Targets: func() []health.Target {
			if dialer == nil {
				return nil
			}
			var out []health.Target
			for _, b := range regional.Balancers() {
				if !b.DataAddress.IsValid() {
					continue // not made yet
				}
				t := health.Target{Region: b.Region, Address: b.DataAddress}
				if len(b.Ports) > 0 {
					t.Port = b.Ports[0]
				}
				out = append(out, t)
			}
			return out
		},
	})
}

// regionLBs is what the API reports of the regional load balancers.
func regionLBs(regional *regionlb.Regional) []apiserver.RegionLB {
	var out []apiserver.RegionLB
	for _, b := range regional.Balancers() {
		rl := apiserver.RegionLB{Region: b.Region, Ports: b.Ports, Synced: b.Synced, Error: b.Error}
		if b.DataAddress.IsValid() {
			rl.Address = b.DataAddress.String()
		}
		out = append(out, rl)
	}
	return out
}

// clientRTTs is what the API reports of the round trips the regional load balancers measured.
func clientRTTs(rtts *rtt.Collector) []apiserver.ClientRTT {
	entries := rtts.Entries()
	out := make([]apiserver.ClientRTT, 0, len(entries))
	for _, e := range entries {
		out = append(out, apiserver.ClientRTT{Network: e.RTT.Network.String(), Region: e.Region,
			SRTTms: math.Round(float64(e.RTT.SRTT)/float64(time.Microsecond)) / 1000, Samples: e.RTT.Samples, LastSeen: e.RTT.LastSeen})
	}
	return out
}

// frontDoor is what the API reports of the front door.
func frontDoor(f *front.Sync) apiserver.FrontDoor {
	s := f.Status()
	out := apiserver.FrontDoor{Listeners: []apiserver.FrontListener{}, Synced: s.Synced, Error: s.Error}
	if s.DataAddress.IsValid() {
		out.Address = s.DataAddress.String()
	}
	for _, l := range s.Listeners {
		out.Listeners = append(out.Listeners, apiserver.FrontListener{Name: l.Name, Fleet: l.Fleet, Port: l.Port, Regions: l.Regions})
	}
	health, err := f.RegionHealth()
	if err != nil && out.Error == "" {
		out.Error = "reading its health: " + err.Error()
	}
	for _, h := range health {
		out.Regions = append(out.Regions, apiserver.FrontRegion{Listener: h.Listener, Region: h.ID, State: string(h.State),
			RTTms: float64(h.RTT.D()) / float64(time.Millisecond), LastError: h.LastError})
	}
	return out
}
