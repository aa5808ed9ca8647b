package client

import (
	"context"
	"net/http"
	"net/url"

	"herd.dev/herd/internal/apiserver"
)

// Usage returns what each instance and fleet uses and serves now (herd top), of one fleet or of
// all when fleet is "".
func (c *Client) Usage(ctx context.Context, fleet string) (*apiserver.UsageReport, error) {
	var out apiserver.UsageReport
	if err := c.do(ctx, http.MethodGet, "/v1/usage?fleet="+url.QueryEscape(fleet), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
