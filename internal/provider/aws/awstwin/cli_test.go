package awstwin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"

	"herd.dev/herd/internal/provider/aws/awstwin"
)

// awsCLI finds the AWS CLI, from Debian's awscli (hack/install-deps.sh). Under CI a missing one
// fails the test: the twin's agreement with AWS is not proven without it.
func awsCLI(t *testing.T) string {
	path, err := exec.LookPath("aws")
	if err == nil {
		return path
	}
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatal("aws is not installed: run hack/install-deps.sh (Debian package awscli)")
	}
	t.Skip("aws is not installed: run hack/install-deps.sh (Debian package awscli)")
	return ""
}

// cli runs the AWS CLI's ec2 commands against the twin (cliService).
func cli(t *testing.T, tw *awstwin.Twin, out any, args ...string) {
	t.Helper()
	cliService(t, tw, out, "ec2", args...)
}

// cliService runs the AWS CLI's commands of service against the twin with dummy credentials and
// nothing of the host's AWS configuration, and decodes its JSON answer into out.
func cliService(t *testing.T, tw *awstwin.Twin, out any, service string, args ...string) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(awsCLI(t), append([]string{"--endpoint-url", tw.URL, "--region", region, "--output", "json", service}, args...)...)
	// The host's own AWS settings stay out; the rest (PATH, pyenv's) is what finds the CLI.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	cmd.Env = append(env,
		"AWS_ACCESS_KEY_ID="+awstwin.DefaultAccessKeyID, "AWS_SECRET_ACCESS_KEY="+awstwin.DefaultSecretAccessKey,
		"AWS_EC2_METADATA_DISABLED=true", "AWS_CONFIG_FILE="+home+"/config", "AWS_SHARED_CREDENTIALS_FILE="+home+"/credentials",
		"AWS_PAGER=",
	)
	b, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("aws %s %v: %v\n%s%s", service, args, err, b, stderr)
	}
	if out == nil {
		return
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("aws %s %v answered what is not JSON: %v\n%s", service, args, err, b)
	}
}

// What the CLI decodes of an instance.
type cliInstance struct {
	InstanceID       string `json:"InstanceId"`
	InstanceType     string
	ImageID          string `json:"ImageId"`
	PrivateIPAddress string `json:"PrivateIpAddress"`
	SubnetID         string `json:"SubnetId"`
	ClientToken      string
	State            struct{ Name string }
	Tags             []struct{ Key, Value string }
}

type cliReservations struct {
	Reservations []struct{ Instances []cliInstance }
}

// The AWS CLI (botocore, written apart from the Go SDK) drives the twin through every action
// herd's provider calls, and what it reads agrees with what the SDK reads: the twin speaks
// EC2's protocol, not only what one client accepts.
func TestAWSCLIAgreesWithSDK(t *testing.T) {
	awsCLI(t)
	tw := awstwin.New(t, awstwin.Options{})
	ami := tw.AddImage(region, "hello", map[string]string{"herd.dev/image": "sha256:abc"})
	sdk := tw.Client(region)
	ctx := context.Background()

	var images struct {
		Images []struct {
			ImageID string `json:"ImageId"`
		}
	}
	cli(t, tw, &images, "describe-images", "--owners", "self", "--filters", "Name=tag:herd.dev/image,Values=sha256:abc")
	if len(images.Images) != 1 || images.Images[0].ImageID != ami {
		t.Fatalf("CLI describe-images by tag: %+v, want %s", images.Images, ami)
	}

	// Launched by the CLI, twice with one client token, seen by the SDK.
	var ran struct{ Instances []cliInstance }
	launch := []string{"run-instances", "--image-id", ami, "--instance-type", "t3.small", "--count", "1",
		"--client-token", "cli-token-1", "--subnet-id", "subnet-0a", "--security-group-ids", "sg-01",
		"--tag-specifications", "ResourceType=instance,Tags=[{Key=herd.dev/fleet,Value=cli}]"}
	cli(t, tw, &ran, launch...)
	var again struct{ Instances []cliInstance }
	cli(t, tw, &again, launch...)
	if len(ran.Instances) != 1 || len(again.Instances) != 1 || ran.Instances[0].InstanceID != again.Instances[0].InstanceID {
		t.Fatalf("CLI run-instances twice with one client token: %+v then %+v, want one instance", ran.Instances, again.Instances)
	}
	got := ran.Instances[0]
	d, err := sdk.DescribeInstances(ctx, &ec2.DescribeInstancesInput{InstanceIds: []string{got.InstanceID}})
	if err != nil {
		t.Fatal(err)
	}
	seen := d.Reservations[0].Instances[0]
	if string(seen.InstanceType) != got.InstanceType || aws.ToString(seen.ImageId) != got.ImageID ||
		aws.ToString(seen.PrivateIpAddress) != got.PrivateIPAddress || aws.ToString(seen.SubnetId) != got.SubnetID ||
		aws.ToString(seen.ClientToken) != "cli-token-1" || tag(seen.Tags, "herd.dev/fleet") != "cli" {
		t.Fatalf("the SDK sees %+v, the CLI launched %+v", seen, got)
	}

	// Launched by the SDK, found by the CLI's tag filter over pages of 5, tagged by the CLI.
	var ids []string
	for i := range 7 {
		out, err := run(t, sdk, ami, fmt.Sprintf("sdk-%d", i), "t3.micro", map[string]string{"herd.dev/fleet": "sdk"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, aws.ToString(out.Instances[0].InstanceId))
	}
	var listed cliReservations
	cli(t, tw, &listed, "describe-instances", "--page-size", "5", "--filters", "Name=tag:herd.dev/fleet,Values=sdk", "Name=instance-state-name,Values=pending,running")
	var listedIDs []string
	for _, r := range listed.Reservations {
		for _, in := range r.Instances {
			listedIDs = append(listedIDs, in.InstanceID)
		}
	}
	if !slices.Equal(listedIDs, ids) {
		t.Fatalf("CLI describe-instances over pages of 5: %v, want the SDK's %v", listedIDs, ids)
	}
	if calls := tw.Calls()["DescribeInstances"]; calls < 3 {
		t.Errorf("the CLI paged in %d calls, want 2 pages after the SDK's call", calls)
	}
	cli(t, tw, nil, "create-tags", "--resources", ids[0], "--tags", "Key=herd.dev/deleting,Value=true")
	d, err = sdk.DescribeInstances(ctx, &ec2.DescribeInstancesInput{Filters: []types.Filter{{Name: aws.String("tag:herd.dev/deleting"), Values: []string{"true"}}}})
	if err != nil || len(d.Reservations) != 1 || aws.ToString(d.Reservations[0].Instances[0].InstanceId) != ids[0] {
		t.Fatalf("the SDK's filter on the CLI's tag: %+v, %v; want %s", d.Reservations, err, ids[0])
	}

	// Terminated by the CLI, as the SDK reads it.
	var term struct {
		TerminatingInstances []struct {
			InstanceID                  string `json:"InstanceId"`
			CurrentState, PreviousState struct{ Name string }
		}
	}
	cli(t, tw, &term, "terminate-instances", "--instance-ids", ids[0], ids[1])
	if len(term.TerminatingInstances) != 2 || term.TerminatingInstances[0].CurrentState.Name != "terminated" || term.TerminatingInstances[0].PreviousState.Name != "running" {
		t.Fatalf("CLI terminate-instances: %+v", term.TerminatingInstances)
	}
	if state := describeState(t, sdk, ids[1]); state != types.InstanceStateNameTerminated {
		t.Fatalf("the SDK sees %s terminated by the CLI as %s", ids[1], state)
	}
}

func tag(tags []types.Tag, key string) string {
	for _, t := range tags {
		if aws.ToString(t.Key) == key {
			return aws.ToString(t.Value)
		}
	}
	return ""
}
