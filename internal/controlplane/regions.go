package controlplane

import (
	"context"
	"log/slog"
	"net"
	"time"

	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/lbsync"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/regionhealth"
	"herd.dev/herd/internal/routes"
)

// newRegionChecker probes the regions whose load balancers regional configures, from the
// clients' side of the first provider that can dial from there (provider.ClientDialer); with
// none, it probes nothing. onChange hears of every region whose verdict changed.
func newRegionChecker(regional *lbsync.Regional, providers map[string]provider.Provider, log *slog.Logger, onChange func(region string)) (*regionhealth.Checker, error) {
	var dialer provider.ClientDialer
	for _, d := range providersAs[provider.ClientDialer](providers) {
		dialer = d
		break
	}
	return regionhealth.New(regionhealth.Options{
		Logger:   log,
		OnChange: onChange,
		Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
			return dialer.DialFromClients(ctx, network, address)
		},
		Targets: func() []regionhealth.Target {
			if dialer == nil {
				return nil
			}
			var out []regionhealth.Target
			for _, b := range regional.Balancers() {
				if !b.DataAddress.IsValid() {
					continue // not made yet
				}
				t := regionhealth.Target{Region: b.Region, Address: b.DataAddress}
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
func regionLBs(regional *lbsync.Regional) []apiserver.RegionLB {
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

// rttPollInterval is how often the regional load balancers' client round trips are read: the
// latency policy follows clients' networks over seconds, not per request.
const rttPollInterval = 5 * time.Second

// lbAdmins are the admin APIs of the regional load balancers, for the RTT poller.
func lbAdmins(regional *lbsync.Regional) []routes.LBAdmin {
	var out []routes.LBAdmin
	for region, a := range regional.Admins() {
		out = append(out, routes.LBAdmin{Region: region, URL: a.URL, Token: a.Token})
	}
	return out
}
