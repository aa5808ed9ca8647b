package client

import (
	"context"
	"net/http"

	"herd.dev/herd/internal/global/routes"
)

// Routes returns what herd's DNS answers from: every global hostname, its regions' load balancer
// addresses and health, and the round-trip times measured per client network.
func (c *Client) Routes(ctx context.Context) (routes.Table, error) {
	var out routes.Table
	err := c.do(ctx, http.MethodGet, "/v1/routes", nil, &out)
	return out, err
}

// WithServer returns a client of the same token that talks to server only.
func (c *Client) WithServer(server string) *Client {
	cfg := c.cfg
	cfg.Server, cfg.Servers = server, nil
	return New(&cfg)
}
