package e2e

import (
	"context"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	ec2types "github.com/aws/aws-sdk-go-v2/service/ec2/types"
	elb "github.com/aws/aws-sdk-go-v2/service/elasticloadbalancingv2"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/provider/local/localtest"
)

// liveSettings are the environment variables TestIntegrationAWS reads against a real account
// (make test-aws-live; docs/aws.md), the required ones first.
var liveSettings = []struct {
	name, option string
	required     bool
}{
	{"HERD_AWS_REGION", "region", true},
	{"HERD_AWS_SUBNETS", "subnets", true},
	{"HERD_AWS_SECURITY_GROUPS", "securityGroups", true},
	{"HERD_AWS_INSTANCE_TYPES", "instanceTypes", true},
	{"HERD_AWS_AMI", "ami", false},
	{"HERD_AWS_TARGET_GROUP", "targetGroup", false},
	{"HERD_AWS_INSTANCE_PROFILE", "instanceProfile", false},
	{"HERD_AWS_HERD_UP", "herdUp", false},
}

// liveCloud is a real AWS account, reached with the SDK's default credential chain.
type liveCloud struct {
	e    *env
	opts map[string]string
	ec2  *ec2.Client
	elb  *elb.Client
}

var _ cloud = (*liveCloud)(nil)

// newLiveCloud reads the live settings; a required one missing, or credentials the SDK cannot
// find, fail the test naming what to set.
func newLiveCloud(e *env) *liveCloud {
	t := e.t
	c := &liveCloud{e: e, opts: map[string]string{}}
	var missing []string
	for _, s := range liveSettings {
		v := os.Getenv(s.name)
		if v == "" && s.required {
			missing = append(missing, s.name)
		}
		if v != "" {
			c.opts[s.option] = v
		}
	}
	if len(missing) > 0 {
		t.Fatalf("HERD_AWS_LIVE is set and %s are not: docs/aws.md says what each holds", strings.Join(missing, ", "))
	}
	cfg, err := config.LoadDefaultConfig(context.Background(), config.WithRegion(c.opts["region"]))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cfg.Credentials.Retrieve(context.Background()); err != nil {
		t.Fatalf("HERD_AWS_LIVE is set and the SDK finds no AWS credentials (environment, profile, instance role): %v", err)
	}
	c.ec2, c.elb = ec2.NewFromConfig(cfg), elb.NewFromConfig(cfg)
	return c
}

// prepare pushes the hello image as an AMI unless HERD_AWS_AMI names one.
func (c *liveCloud) prepare() {
	if c.opts["ami"] != "" {
		return
	}
	out, err := c.e.herd("image", "push", "aws", "hello", "--region", c.opts["region"], "--data-dir", c.e.data)
	if err != nil {
		c.e.t.Fatalf("herd image push aws hello: %v\n%s", err, tail(out, 30))
	}
}

func (c *liveCloud) regionOptions() map[string]string { return c.opts }

// upEnv adds nothing: herd up finds the credentials the test found.
func (c *liveCloud) upEnv() []string { return nil }

// instances lists the fleet's instances that this herd installation launched.
func (c *liveCloud) instances() ([]cloudInstance, error) {
	keys, err := agentauth.Open(c.e.data)
	if err != nil {
		return nil, err
	}
	in := &ec2.DescribeInstancesInput{Filters: []ec2types.Filter{
		{Name: aws.String("tag:" + v1alpha1.LabelFleet), Values: []string{awsFleet}},
		{Name: aws.String("tag:herd.dev/installation"), Values: []string{keys.ID()}},
		{Name: aws.String("instance-state-name"), Values: []string{"pending", "running", "stopping", "stopped"}},
	}}
	var out []cloudInstance
	pages := ec2.NewDescribeInstancesPaginator(c.ec2, in)
	for pages.HasMorePages() {
		page, err := pages.NextPage(context.Background())
		if err != nil {
			return nil, err
		}
		for _, r := range page.Reservations {
			for _, x := range r.Instances {
				ci := cloudInstance{ID: aws.ToString(x.InstanceId), Type: string(x.InstanceType)}
				if x.State != nil {
					ci.State = string(x.State.Name)
				}
				for _, tag := range x.Tags {
					if aws.ToString(tag.Key) == "herd.dev/instance" {
						ci.Name = aws.ToString(tag.Value)
					}
				}
				out = append(out, ci)
			}
		}
	}
	return out, nil
}

func (c *liveCloud) targets() (map[string]string, error) {
	out := map[string]string{}
	if c.opts["targetGroup"] == "" {
		return out, nil
	}
	h, err := c.elb.DescribeTargetHealth(context.Background(), &elb.DescribeTargetHealthInput{TargetGroupArn: aws.String(c.opts["targetGroup"])})
	if err != nil {
		return nil, err
	}
	for _, d := range h.TargetHealthDescriptions {
		state := ""
		if d.TargetHealth != nil {
			state = string(d.TargetHealth.State)
		}
		out[aws.ToString(d.Target.Id)] = state
	}
	return out, nil
}

func (c *liveCloud) terminate(id string) error {
	_, err := c.ec2.TerminateInstances(context.Background(), &ec2.TerminateInstancesInput{InstanceIds: []string{id}})
	return err
}

// stopped has nothing to stop: the account's instances are the fleet's, deleted through herd.
func (c *liveCloud) stopped() localtest.Owned { return localtest.Owned{} }
