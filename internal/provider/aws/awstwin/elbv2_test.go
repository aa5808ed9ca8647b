package awstwin_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"
	elbtypes "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2/types"

	"herd.dev/herd/internal/provider/aws/awstwin"
)

// What the CLI decodes of a target's health.
type cliTargetHealth struct {
	TargetHealthDescriptions []struct {
		Target struct {
			ID   string `json:"Id"`
			Port int
		}
		TargetHealth struct{ State, Reason string }
	}
}

// The AWS CLI and the SDK drive the twin's target groups through every ELB action herd's
// provider calls and agree on what they read: groups and their deregistration delay, targets
// registered by one and seen healthy by the other, a deregistered target draining for the
// group's delay, an instance never registered unused; and ELB's refusals decode as the SDK's
// errors.
func TestELBCLIAgreesWithSDK(t *testing.T) {
	awsCLI(t)
	tw := awstwin.New(t, awstwin.Options{})
	ami := tw.AddImage(region, "hello", nil)
	arn := tw.AddTargetGroup(region, "web", time.Hour)
	ec2c, c := tw.Client(region), tw.ELBClient(region)
	ctx := context.Background()
	var ids []string
	for _, token := range []string{"a", "b", "c"} {
		out, err := run(t, ec2c, ami, token, "t3.small", nil)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.Instances[0].InstanceId))
	}

	var groups struct {
		TargetGroups []struct {
			TargetGroupArn, TargetGroupName, TargetType string
			Port                                        int
		}
	}
	cliService(t, tw, &groups, "elbv2", "describe-target-groups", "--target-group-arns", arn)
	sdkGroups, err := c.DescribeTargetGroups(ctx, &elb.DescribeTargetGroupsInput{Names: []string{"web"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(groups.TargetGroups) != 1 || len(sdkGroups.TargetGroups) != 1 || groups.TargetGroups[0].TargetGroupArn != arn ||
		aws.ToString(sdkGroups.TargetGroups[0].TargetGroupArn) != arn || groups.TargetGroups[0].TargetType != string(sdkGroups.TargetGroups[0].TargetType) ||
		groups.TargetGroups[0].Port != int(aws.ToInt32(sdkGroups.TargetGroups[0].Port)) {
		t.Fatalf("describe-target-groups: the CLI reads %+v, the SDK %+v", groups.TargetGroups, sdkGroups.TargetGroups)
	}
	var attrs struct{ Attributes []struct{ Key, Value string } }
	cliService(t, tw, &attrs, "elbv2", "describe-target-group-attributes", "--target-group-arn", arn)
	delay := ""
	for _, a := range attrs.Attributes {
		if a.Key == "deregistration_delay.timeout_seconds" {
			delay = a.Value
		}
	}
	if delay != "3600" {
		t.Errorf("the CLI reads a deregistration delay of %q (attributes %+v), want 3600", delay, attrs.Attributes)
	}

	// Registered by the CLI, healthy to the SDK.
	cliService(t, tw, nil, "elbv2", "register-targets", "--target-group-arn", arn, "--targets", "Id="+ids[0], "Id="+ids[1])
	health, err := c.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn)})
	if err != nil {
		t.Fatal(err)
	}
	if len(health.TargetHealthDescriptions) != 2 {
		t.Fatalf("the SDK sees %d targets, want the 2 the CLI registered", len(health.TargetHealthDescriptions))
	}
	for _, d := range health.TargetHealthDescriptions {
		if d.TargetHealth.State != elbtypes.TargetHealthStateEnumHealthy || aws.ToInt32(d.Target.Port) != 80 {
			t.Errorf("target %s: %s on port %d, want healthy on the group's port 80", aws.ToString(d.Target.Id), d.TargetHealth.State, aws.ToInt32(d.Target.Port))
		}
	}

	// Deregistered by the SDK, draining to the CLI; one never registered is unused.
	if _, err := c.DeregisterTargets(ctx, &elb.DeregisterTargetsInput{TargetGroupArn: aws.String(arn),
		Targets: []elbtypes.TargetDescription{{Id: aws.String(ids[0])}}}); err != nil {
		t.Fatal(err)
	}
	var seen cliTargetHealth
	cliService(t, tw, &seen, "elbv2", "describe-target-health", "--target-group-arn", arn, "--targets", "Id="+ids[0], "Id="+ids[1], "Id="+ids[2])
	want := map[string]string{ids[0]: "draining/Target.DeregistrationInProgress", ids[1]: "healthy/", ids[2]: "unused/Target.NotRegistered"}
	if len(seen.TargetHealthDescriptions) != 3 {
		t.Fatalf("the CLI reads %+v, want 3 targets", seen.TargetHealthDescriptions)
	}
	for _, d := range seen.TargetHealthDescriptions {
		if got := d.TargetHealth.State + "/" + d.TargetHealth.Reason; got != want[d.Target.ID] {
			t.Errorf("the CLI reads %s as %s, want %s", d.Target.ID, got, want[d.Target.ID])
		}
	}

	// ELB's refusals, as the SDK decodes them.
	var notFound *elbtypes.TargetGroupNotFoundException
	if _, err := c.DescribeTargetHealth(ctx, &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(arn + "0")}); !errors.As(err, &notFound) {
		t.Errorf("an unknown target group: %v, want TargetGroupNotFound", err)
	}
	var invalid *elbtypes.InvalidTargetException
	if _, err := c.RegisterTargets(ctx, &elb.RegisterTargetsInput{TargetGroupArn: aws.String(arn),
		Targets: []elbtypes.TargetDescription{{Id: aws.String("i-0000000000000dead")}}}); !errors.As(err, &invalid) {
		t.Errorf("an unknown instance: %v, want InvalidTarget", err)
	}
	if err := tw.TerminateFromOutside(ids[1], "Server.SpotInstanceTermination", "Server.SpotInstanceTermination: Spot instance termination"); err != nil {
		t.Fatal(err)
	}
	if got := tw.Targets(arn)[ids[1]]; got != awstwin.TargetDraining {
		t.Errorf("a registered instance terminated from outside is %q in the group, want draining (ELB deregisters it)", got)
	}
	if cut := tw.CutOff(); len(cut) != 1 || cut[0] != ids[1] {
		t.Errorf("cut off: %v, want %s, terminated while registered", cut, ids[1])
	}
}
