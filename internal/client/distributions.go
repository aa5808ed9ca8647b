package client

import (
	"context"
	"net/http"
	"net/url"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/edgeplane"
)

// ApplyAll stores fleets and distributions, all or none.
func (c *Client) ApplyAll(ctx context.Context, fleets []v1alpha1.Fleet, dists []v1alpha1.Distribution) ([]apiserver.ApplyResult, error) {
	var out []apiserver.ApplyResult
	err := c.do(ctx, http.MethodPost, "/v1/apply", apiserver.ApplyRequest{Fleets: fleets, Distributions: dists}, &out)
	return out, err
}

// ListDistributions returns every distribution, with its edge location's status.
func (c *Client) ListDistributions(ctx context.Context) ([]v1alpha1.Distribution, error) {
	var out []v1alpha1.Distribution
	err := c.do(ctx, http.MethodGet, "/v1/distributions", nil, &out)
	return out, err
}

// GetDistribution returns one distribution, with its edge location's status.
func (c *Client) GetDistribution(ctx context.Context, name string) (*v1alpha1.Distribution, error) {
	var out v1alpha1.Distribution
	if err := c.do(ctx, http.MethodGet, "/v1/distributions/"+url.PathEscape(name), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteDistribution deletes a distribution; its edge locations stop.
func (c *Client) DeleteDistribution(ctx context.Context, name string) error {
	return c.do(ctx, http.MethodDelete, "/v1/distributions/"+url.PathEscape(name), nil, nil)
}

// Invalidate drops a distribution's objects whose paths match paths, at every edge location.
func (c *Client) Invalidate(ctx context.Context, name string, paths []string) (*edgeplane.InvalidationResult, error) {
	var out edgeplane.InvalidationResult
	if err := c.do(ctx, http.MethodPost, "/v1/distributions/"+url.PathEscape(name)+"/invalidations", apiserver.InvalidationRequest{Paths: paths}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EdgeStats returns a distribution's figures at the edge location of the replica that answers.
func (c *Client) EdgeStats(ctx context.Context, name string) (*apiserver.EdgeStats, error) {
	var out apiserver.EdgeStats
	if err := c.do(ctx, http.MethodGet, "/v1/distributions/"+url.PathEscape(name)+"/stats", nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
