package controlplane

import (
	"context"
	"fmt"

	"herd.dev/herd/internal/global/route53sync"
)

// Route53Options keep a Route 53 hosted zone in step with herd's global routes (herd up
// --route53-zone).
type Route53Options struct {
	// ZoneID is the hosted zone's ID; empty keeps none.
	ZoneID string
	// Endpoint replaces Route 53's API URL (an AWS-compatible API, or the twin).
	Endpoint string
	// AWSRegions maps herd regions to AWS regions for latency records.
	AWSRegions map[string]string
}

// buildRoute53 builds the zone's syncer, which follows the routes with this installation's id
// as the owner of what it writes.
func (p *parts) buildRoute53(ctx context.Context) error {
	o := p.opts.Route53
	if o.ZoneID == "" {
		return nil
	}
	client, err := route53sync.NewClient(ctx, o.Endpoint)
	if err != nil {
		return fmt.Errorf("--route53-zone: %w", err)
	}
	p.route53, err = route53sync.New(route53sync.Options{
		ZoneID: o.ZoneID, Installation: p.agentKeys.ID(), Client: client, Table: p.routes.Table,
		AWSRegions: o.AWSRegions, Logger: p.log,
	})
	if err != nil {
		return fmt.Errorf("--route53-zone: %w", err)
	}
	p.log.Info("route53 sync", "component", "route53", "zone", o.ZoneID)
	return nil
}
