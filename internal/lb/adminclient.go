package lb

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// AdminClient is a client of a standalone load balancer's admin API (NewAdminHandler): what a
// controller running elsewhere configures it with. Every call is bounded by its Timeout.
type AdminClient struct {
	// URL is the admin API's base URL, e.g. http://10.213.0.2:9443.
	URL string
	// Token is the admin API's bearer token. A secret: never log it.
	Token string
	// Timeout bounds each call. Default 5s.
	Timeout time.Duration
	// HTTP is the client used. Default: one without keep-alive reuse limits beyond net/http's.
	HTTP *http.Client
}

// Apply replaces the load balancer's whole config (PUT /config). Applying the config it already
// has changes nothing (see LB.Apply): listeners keep their sockets, targets their verdicts.
func (c *AdminClient) Apply(cfg Config) error {
	body, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return c.call(http.MethodPut, "/config", body, nil)
}

// Config returns the config the load balancer runs (GET /config).
func (c *AdminClient) Config() (Config, error) {
	var cfg Config
	err := c.call(http.MethodGet, "/config", nil, &cfg)
	return cfg, err
}

// TargetHealth returns the health of every target (GET /health).
func (c *AdminClient) TargetHealth() ([]TargetHealth, error) {
	var out []TargetHealth
	err := c.call(http.MethodGet, "/health", nil, &out)
	return out, err
}

// Stats returns a snapshot of the load balancer's counters per fleet, group and target (GET
// /stats), as Metrics gives them in process.
func (c *AdminClient) Stats() (Snapshot, error) {
	var out Snapshot
	err := c.call(http.MethodGet, "/stats", nil, &out)
	return out, err
}

// ClientRTTs returns the round trip to each client network the load balancer served (GET /rtt),
// sorted by network.
func (c *AdminClient) ClientRTTs() ([]NetworkRTT, error) {
	var out []NetworkRTT
	err := c.call(http.MethodGet, "/rtt", nil, &out)
	return out, err
}

func (c *AdminClient) call(method, path string, body []byte, out any) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	url := strings.TrimSuffix(c.URL, "/") + path
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("load balancer admin API: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminBody))
	if err != nil {
		return fmt.Errorf("load balancer admin API %s %s: %w", method, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e errorBody
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("load balancer admin API %s %s: %s", method, url, e.Error)
		}
		return fmt.Errorf("load balancer admin API %s %s: %s", method, url, resp.Status)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("load balancer admin API %s %s: %w", method, url, err)
	}
	return nil
}
