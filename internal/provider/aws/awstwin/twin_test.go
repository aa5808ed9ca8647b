package awstwin_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/aws/smithy-go"

	"herd.dev/herd/internal/provider/aws/awstwin"
)

const region = "eu-west-1"

func run(t *testing.T, c *ec2.Client, ami, token, instanceType string, tags map[string]string) (*ec2.RunInstancesOutput, error) {
	t.Helper()
	in := &ec2.RunInstancesInput{
		ImageId: aws.String(ami), InstanceType: types.InstanceType(instanceType),
		MinCount: aws.Int32(1), MaxCount: aws.Int32(1), SubnetId: aws.String("subnet-0a"),
		SecurityGroupIds: []string{"sg-01"},
	}
	if token != "" {
		in.ClientToken = aws.String(token)
	}
	spec := types.TagSpecification{ResourceType: types.ResourceTypeInstance}
	for k, v := range tags {
		spec.Tags = append(spec.Tags, types.Tag{Key: aws.String(k), Value: aws.String(v)})
	}
	in.TagSpecifications = []types.TagSpecification{spec}
	return c.RunInstances(context.Background(), in)
}

func code(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// The SDK's signing, serialization and decoding run against the twin: a ClientToken answers with
// the same reservation, other parameters with it are refused, tag filters and pagination find
// exactly the instances asked for, and termination goes through shutting-down to terminated.
func TestLifecycleThroughTheSDK(t *testing.T) {
	now := time.Now()
	clock := func() time.Time { return now }
	tw := awstwin.New(t, awstwin.Options{PendingDelay: time.Minute, ShutdownDelay: time.Minute, Now: clock})
	ami := tw.AddImage(region, "hello", map[string]string{"herd.dev/image": "sha256:abc"})
	c := tw.Client(region)
	ctx := context.Background()

	first, err := run(t, c, ami, "tok-1", "t3.small", map[string]string{"fleet": "a"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := run(t, c, ami, "tok-1", "t3.small", map[string]string{"fleet": "a"})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(first.Instances[0].InstanceId)
	if aws.ToString(again.Instances[0].InstanceId) != id || aws.ToString(again.ReservationId) != aws.ToString(first.ReservationId) {
		t.Fatalf("a repeated ClientToken launched %s, want %s again", aws.ToString(again.Instances[0].InstanceId), id)
	}
	if first.Instances[0].State.Name != types.InstanceStateNamePending || aws.ToString(first.Instances[0].PrivateIpAddress) == "" {
		t.Errorf("new instance: state %s, address %q; want pending with an address", first.Instances[0].State.Name, aws.ToString(first.Instances[0].PrivateIpAddress))
	}
	if _, err := run(t, c, ami, "tok-1", "t3.large", map[string]string{"fleet": "a"}); code(err) != "IdempotentParameterMismatch" {
		t.Fatalf("ClientToken reused with another type: %v, want IdempotentParameterMismatch", err)
	}
	for i := range 11 {
		if _, err := run(t, c, ami, fmt.Sprintf("tok-b%d", i), "t3.small", map[string]string{"fleet": "b"}); err != nil {
			t.Fatal(err)
		}
	}

	p := ec2.NewDescribeInstancesPaginator(c, &ec2.DescribeInstancesInput{
		Filters:    []types.Filter{{Name: aws.String("tag:fleet"), Values: []string{"b"}}},
		MaxResults: aws.Int32(5),
	})
	pages, seen := 0, map[string]bool{}
	for p.HasMorePages() {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, r := range out.Reservations {
			for _, in := range r.Instances {
				if seen[aws.ToString(in.InstanceId)] || in.Tags[0].Value == nil || *in.Tags[0].Value != "b" {
					t.Errorf("page %d: instance %s repeated or not of fleet b", pages, aws.ToString(in.InstanceId))
				}
				seen[aws.ToString(in.InstanceId)] = true
			}
		}
	}
	if len(seen) != 11 || pages != 3 {
		t.Fatalf("fleet b in pages of 5: %d instances in %d pages, want 11 in 3", len(seen), pages)
	}

	now = now.Add(time.Minute)
	if state := describeState(t, c, id); state != types.InstanceStateNameRunning {
		t.Fatalf("after the pending delay: %s, want running", state)
	}
	term, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	if ch := term.TerminatingInstances[0]; ch.PreviousState.Name != types.InstanceStateNameRunning || ch.CurrentState.Name != types.InstanceStateNameShuttingDown {
		t.Fatalf("terminate: %s -> %s, want running -> shutting-down", ch.PreviousState.Name, ch.CurrentState.Name)
	}
	now = now.Add(time.Minute)
	if state := describeState(t, c, id); state != types.InstanceStateNameTerminated {
		t.Fatalf("after the shutdown delay: %s, want terminated", state)
	}
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{"i-0000000000000dead"}}); code(err) != "InvalidInstanceID.NotFound" {
		t.Fatalf("describe an unknown ID: %v, want InvalidInstanceID.NotFound", err)
	}
	if out, err := tw.Client("us-east-1").DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil || len(out.Reservations) != 0 {
		t.Fatalf("another region sees %v (%v), want nothing: each region is its own", out.Reservations, err)
	}
}

func describeState(t *testing.T, c *ec2.Client, id string) types.InstanceStateName {
	t.Helper()
	out, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	return out.Reservations[0].Instances[0].State.Name
}

// A request signed with a wrong secret is refused as EC2 refuses it: the twin checks SigV4.
func TestWrongSecretIsAuthFailure(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	c := tw.Client(region, func(o *ec2.Options) {
		o.Credentials = credentials.NewStaticCredentialsProvider(awstwin.DefaultAccessKeyID, "not-the-secret", "")
	})
	if _, err := c.DescribeInstances(context.Background(), &ec2.DescribeInstancesInput{}); code(err) != "AuthFailure" {
		t.Fatalf("wrong secret: %v, want AuthFailure", err)
	}
}

// Each fault answers with EC2's error code, which the SDK decodes; throttling is retried by the
// SDK's own retryer until the storm passes.
func TestFaults(t *testing.T) {
	tw := awstwin.New(t, awstwin.Options{})
	ami := tw.AddImage(region, "hello", nil)
	c := tw.Client(region, func(o *ec2.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 5
			so.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return time.Millisecond, nil })
		})
	})
	ctx := context.Background()

	tw.NoCapacity("t3.small", "")
	if _, err := run(t, c, ami, "", "t3.small", nil); code(err) != "InsufficientInstanceCapacity" {
		t.Errorf("no capacity: %v", err)
	}
	tw.Unsupported("t3.nano")
	if _, err := run(t, c, ami, "", "t3.nano", nil); code(err) != "Unsupported" {
		t.Errorf("unsupported type: %v", err)
	}
	tw.Deny("TerminateInstances")
	if _, err := c.TerminateInstances(ctx, &ec2.TerminateInstancesInput{InstanceIds: []string{"i-1"}}); code(err) != "UnauthorizedOperation" {
		t.Errorf("denied action: %v", err)
	}

	before := tw.Calls()["DescribeInstances"]
	tw.Throttle(3)
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{}); err != nil {
		t.Fatalf("3 throttled calls with 5 attempts: %v", err)
	}
	if got := tw.Calls()["DescribeInstances"] - before; got != 4 {
		t.Errorf("DescribeInstances reached the twin %d times, want 4 (3 throttled, then answered)", got)
	}

	tw.Lag(time.Hour)
	out, err := run(t, c, ami, "", "t3.medium", map[string]string{"fleet": "lag"})
	if err != nil {
		t.Fatal(err)
	}
	id := aws.ToString(out.Instances[0].InstanceId)
	if _, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}}); code(err) != "InvalidInstanceID.NotFound" {
		t.Errorf("a lagging instance by ID: %v, want InvalidInstanceID.NotFound", err)
	}
	tw.Lag(0)
	if err := tw.TerminateFromOutside(id, "Server.InternalError", "Server.InternalError: Internal error on launch"); err != nil {
		t.Fatal(err)
	}
	d, err := c.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{id}})
	if err != nil {
		t.Fatal(err)
	}
	in := d.Reservations[0].Instances[0]
	if in.State.Name != types.InstanceStateNameTerminated || aws.ToString(in.StateReason.Code) != "Server.InternalError" {
		t.Errorf("terminated from outside: %s %v, want terminated with its reason", in.State.Name, in.StateReason)
	}
}
