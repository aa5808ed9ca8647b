package routes

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/lb"
)

// TestRTTPoller reads two regions' GET /rtt (as lb's admin API writes it) into one table, keeps a
// region's last figures while its load balancer does not answer, and drops stale networks.
func TestRTTPoller(t *testing.T) {
	net1, net2 := netip.MustParsePrefix("10.216.0.0/24"), netip.MustParsePrefix("10.217.0.0/24")
	now := time.Now()
	var euDown atomic.Bool
	serve := func(nets []lb.NetworkRTT, down *atomic.Bool) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer secret" || r.URL.Path != "/rtt" {
				http.Error(w, "no", http.StatusUnauthorized)
				return
			}
			if down != nil && down.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			_ = json.NewEncoder(w).Encode(nets)
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	eu := serve([]lb.NetworkRTT{{Network: net1, SRTT: 12 * time.Millisecond, Samples: 3, LastSeen: now}}, &euDown)
	us := serve([]lb.NetworkRTT{
		{Network: net1, SRTT: 70 * time.Millisecond, Samples: 1, LastSeen: now},
		{Network: net2, SRTT: 5 * time.Millisecond, Samples: 1, LastSeen: now.Add(-time.Hour)},
	}, nil)
	p := &RTTPoller{Admins: func() []LBAdmin {
		return []LBAdmin{{Region: "eu", URL: eu.URL, Token: "secret"}, {Region: "us", URL: us.URL, Token: "secret"}}
	}}
	p.Poll(context.Background())
	got := p.ClientRTT()
	if got[net1]["eu"] != 12*time.Millisecond || got[net1]["us"] != 70*time.Millisecond {
		t.Errorf("%s: %v, want eu 12ms and us 70ms", net1, got[net1])
	}
	if _, stale := got[net2]; stale {
		t.Errorf("%s last seen an hour ago is in the table", net2)
	}
	euDown.Store(true)
	p.Poll(context.Background())
	if got := p.ClientRTT(); got[net1]["eu"] != 12*time.Millisecond {
		t.Errorf("with eu's load balancer down: %v, want its last figure kept", got[net1])
	}
}
