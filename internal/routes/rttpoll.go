package routes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"herd.dev/herd/internal/lb"
)

// LBAdmin is where a region's load balancer serves its admin API (lb.NewAdminHandler).
type LBAdmin struct {
	Region string
	URL    string
	Token  string
}

// RTTPoller is an RTTSource that reads GET /rtt of every regional load balancer: each measures
// the round trip to the client networks it serves (TCP_INFO), and the poller puts them side by
// side, per network and region. A load balancer that does not answer keeps its last figures (its
// region's health, not its distance, keeps it out of answers); figures older than MaxAge are
// dropped, as the client network may have moved.
type RTTPoller struct {
	// Admins lists the regional load balancers to read, at every poll.
	Admins func() []LBAdmin
	// MaxAge drops networks not sampled for this long. Default: 10 minutes.
	MaxAge time.Duration
	Client *http.Client
	Logger *slog.Logger

	mu       sync.Mutex
	byRegion map[string][]lb.NetworkRTT
}

// ClientRTT returns the latest table: network -> region -> smoothed RTT.
func (p *RTTPoller) ClientRTT() map[netip.Prefix]map[string]time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	maxAge := p.MaxAge
	if maxAge == 0 {
		maxAge = 10 * time.Minute
	}
	out := map[netip.Prefix]map[string]time.Duration{}
	for region, nets := range p.byRegion {
		for _, n := range nets {
			if time.Since(n.LastSeen) > maxAge {
				continue
			}
			if out[n.Network] == nil {
				out[n.Network] = map[string]time.Duration{}
			}
			out[n.Network][region] = n.SRTT
		}
	}
	return out
}

// Run polls every interval until ctx ends.
func (p *RTTPoller) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.Poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Poll reads every load balancer once.
func (p *RTTPoller) Poll(ctx context.Context) {
	for _, a := range p.Admins() {
		nets, err := p.read(ctx, a)
		if err != nil {
			if p.Logger != nil {
				p.Logger.Debug("reading a load balancer's client round trips", "region", a.Region, "err", err)
			}
			continue
		}
		p.mu.Lock()
		if p.byRegion == nil {
			p.byRegion = map[string][]lb.NetworkRTT{}
		}
		p.byRegion[a.Region] = nets
		p.mu.Unlock()
	}
}

func (p *RTTPoller) read(ctx context.Context, a LBAdmin) ([]lb.NetworkRTT, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL+"/rtt", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	c := p.Client
	if c == nil {
		c = http.DefaultClient
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s/rtt: %s", a.URL, resp.Status)
	}
	var nets []lb.NetworkRTT
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&nets); err != nil {
		return nil, fmt.Errorf("GET %s/rtt: %w", a.URL, err)
	}
	return nets, nil
}
