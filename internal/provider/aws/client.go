package aws

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	"golang.org/x/time/rate"

	"herd.dev/herd/internal/awsbody"
)

// EC2 error codes the provider acts on.
const (
	codeNoCapacity        = "InsufficientInstanceCapacity"
	codeUnsupported       = "Unsupported"
	codeNotFound          = "InvalidInstanceID.NotFound"
	codeTokenMismatch     = "IdempotentParameterMismatch"
	codeUnauthorized      = "UnauthorizedOperation"
	codeThrottled         = "RequestLimitExceeded"
	codeAccessDenied      = "AccessDenied" // ELB's UnauthorizedOperation
	codeELBThrottled      = "Throttling"
	rateLimitMiddlewareID = "HerdRateLimit"
)

// client returns the EC2 API of target, made on first use.
func (p *Provider) client(ctx context.Context, t target) (ec2API, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[t]; ok {
		return c, nil
	}
	cfg, err := p.sdkConfig(ctx, t)
	if err != nil {
		return nil, err
	}
	limiter := rate.NewLimiter(p.opts.RateLimit, p.opts.RateBurst)
	c := ec2.NewFromConfig(cfg, func(o *ec2.Options) {
		if t.Endpoint != "" {
			o.BaseEndpoint = aws.String(t.Endpoint)
		}
		o.APIOptions = append(o.APIOptions, rateLimit(limiter))
		o.HTTPClient = awsbody.Wrap(o.HTTPClient)
	})
	p.clients[t] = c
	return c, nil
}

// retryer is the SDK's adaptive retryer: its standard retries (backoff with jitter, throttling
// retried, more attempts) and a sending rate that EC2's throttling lowers and that recovers as the
// throttling stops, so that a region whose request budget the account's other callers spend is
// not answered with a storm of retries. It does not retry what another instance type or subnet
// answers better: EC2 sends InsufficientInstanceCapacity with a 500, which the SDK would
// otherwise retry in place.
func (p *Provider) retryer() aws.Retryer {
	return retry.NewAdaptiveMode(func(a *retry.AdaptiveModeOptions) {
		a.StandardOptions = append(a.StandardOptions, func(o *retry.StandardOptions) {
			o.MaxAttempts = p.opts.MaxAttempts
			if p.opts.MaxBackoff > 0 {
				o.MaxBackoff = p.opts.MaxBackoff
				o.Backoff = retry.NewExponentialJitterBackoff(p.opts.MaxBackoff)
			}
			o.Retryables = append([]retry.IsErrorRetryable{retry.IsErrorRetryableFunc(func(err error) aws.Ternary {
				if c := errorCode(err); c == codeNoCapacity || c == codeUnsupported {
					return aws.FalseTernary
				}
				return aws.UnknownTernary
			})}, o.Retryables...)
		})
	})
}

// rateLimit makes every attempt of every call wait for the limiter, retries included, so that
// a throttling storm is not answered with a storm of retries.
func rateLimit(l *rate.Limiter) func(*middleware.Stack) error {
	return func(s *middleware.Stack) error {
		return s.Finalize.Add(middleware.FinalizeMiddlewareFunc(rateLimitMiddlewareID,
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				if err := l.Wait(ctx); err != nil {
					return middleware.FinalizeOutput{}, middleware.Metadata{}, fmt.Errorf("wait for herd's EC2 rate limit: %w", err)
				}
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	}
}

// errorCode is EC2's error code in err, or "".
func errorCode(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// explain says what to fix for the errors a user must act on.
func explain(err error) error {
	var op *smithy.OperationError
	switch c := errorCode(err); {
	case c == codeUnauthorized && errors.As(err, &op):
		return fmt.Errorf("aws: the credentials may not call ec2:%s: allow it in their IAM policy (docs/aws.md has the policy herd needs): %w", op.OperationName, err)
	case c == codeAccessDenied && errors.As(err, &op) && op.ServiceID == elb.ServiceID:
		return fmt.Errorf("aws: the credentials may not call elasticloadbalancing:%s: allow it in their IAM policy (docs/aws.md has the policy herd needs): %w", op.OperationName, err)
	case c == codeThrottled || c == codeELBThrottled:
		return fmt.Errorf("aws: AWS still throttles after the SDK's retries (the account's request rate is spent; herd retries later): %w", err)
	case c == "AuthFailure":
		return fmt.Errorf("aws: EC2 refused the credentials (check the SDK's credential chain: environment, profile, instance role): %w", err)
	}
	return err
}

// isAny reports whether err carries one of EC2's codes.
func isAny(err error, codes ...string) bool { return slices.Contains(codes, errorCode(err)) }
