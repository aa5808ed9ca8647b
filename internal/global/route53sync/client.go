package route53sync

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/route53"

	"herd.dev/herd/internal/awsbody"
)

// MaxAttempts is how many times the client sends a call that Route 53 answers with
// PriorRequestNotComplete, throttling or a server error: the SDK's standard retryer retries
// them with exponential backoff and jitter, and a pass that still fails is tried again later.
const MaxAttempts = 8

// NewClient is a Route 53 client with the SDK's default credential chain (environment, shared
// profile, web identity, instance role) and the standard retryer of MaxAttempts attempts;
// endpoint, if set, replaces Route 53's own (an AWS-compatible API, or the twin).
func NewClient(ctx context.Context, endpoint string, optFns ...func(*config.LoadOptions) error) (*route53.Client, error) {
	retryer := func() aws.Retryer { return retry.AddWithMaxAttempts(retry.NewStandard(), MaxAttempts) }
	cfg, err := config.LoadDefaultConfig(ctx, append([]func(*config.LoadOptions) error{
		config.WithRegion("us-east-1"), config.WithRetryer(retryer),
	}, optFns...)...)
	if err != nil {
		return nil, fmt.Errorf("route53: load the AWS configuration: %w", err)
	}
	return route53.NewFromConfig(cfg, func(o *route53.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.HTTPClient = awsbody.Wrap(o.HTTPClient)
	}), nil
}
