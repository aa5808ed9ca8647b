package aws_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws"
	"herd.dev/herd/internal/provider/aws/awstwin"
	"herd.dev/herd/internal/provider/providertest"
)

const (
	ec2Region = "eu-west-1"
	image     = "sha256:0123456789abcdef"
)

// setup starts a twin with an AMI of image and returns it with region options that reach it.
func setup(t *testing.T, opts awstwin.Options) (*awstwin.Twin, map[string]string) {
	t.Helper()
	tw := awstwin.New(t, opts)
	tw.AddImage(ec2Region, "herd-node", map[string]string{"herd.dev/image": image})
	return tw, map[string]string{
		"region": ec2Region, "endpoint": tw.URL,
		"instanceTypes": "m7i.large,m6i.large", "subnets": "subnet-0aaaaaaaa,subnet-0bbbbbbbb",
		"securityGroups": "sg-0123456789abcdef0", "instanceProfile": "herd-node",
	}
}

// newProvider is a provider of installation that reaches tw quickly: short backoffs and polls.
func newProvider(t *testing.T, tw *awstwin.Twin, installation string) *aws.Provider {
	t.Helper()
	p, err := aws.New(aws.Options{
		Installation: installation, Credentials: tw.Credentials(), StateDir: t.TempDir(),
		RateLimit: 200, RateBurst: 20, MaxBackoff: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func spec(name, fleet string, opts map[string]string) provider.InstanceSpec {
	return provider.InstanceSpec{
		Name: name, Image: image, Region: "r1", Options: opts,
		Labels: map[string]string{v1alpha1.LabelFleet: fleet, v1alpha1.LabelRevision: fleet + "-1", v1alpha1.LabelRegion: "r1"},
	}
}

// The provider passes the suite every provider passes, against EC2's protocol through the SDK,
// and calls no EC2 action that the IAM policy of docs/aws.md does not allow.
func TestConformance(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{PendingDelay: 200 * time.Millisecond, ShutdownDelay: 100 * time.Millisecond})
	delete(opts, "instanceProfile") // the AMI found by the image's tag, the default VPC's subnet
	delete(opts, "subnets")
	providertest.Run(t, func(t *testing.T) provider.Provider { return newProvider(t, tw, "conformance") }, providertest.Options{
		Image: image, Options: opts, ReadyTimeout: 10 * time.Second,
		AfterDelete: func(t *testing.T, in provider.Instance) {
			for _, x := range tw.Instances() {
				if x.Tags["herd.dev/instance"] == in.Name && x.State != awstwin.StateTerminated {
					t.Errorf("after Delete, EC2 instance %s of %s is %s, want terminated", x.ID, in.Name, x.State)
				}
			}
		},
	})
	checkCallsAllowed(t, tw)
}

// checkCallsAllowed fails t for every action the twin answered that docs/aws.md's policy does
// not allow.
func checkCallsAllowed(t *testing.T, tw *awstwin.Twin) {
	t.Helper()
	allowed := policyActions(t)
	for action := range tw.Calls() {
		if !allowed["ec2:"+action] {
			t.Errorf("the provider called ec2:%s, which docs/aws.md's policy does not allow", action)
		}
	}
	for action := range tw.ELBCalls() {
		if !allowed["elasticloadbalancing:"+action] {
			t.Errorf("the provider called elasticloadbalancing:%s, which docs/aws.md's policy does not allow", action)
		}
	}
}

// Creates asked twice each, concurrently, by two provider values (herd up and herd up after a
// restart), while EC2 throttles and DescribeInstances lags behind launches, make one EC2 instance
// per name, none reported missing or failed; deleting them all leaves none running.
func TestCreateUnderLagAndThrottling(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{PendingDelay: 50 * time.Millisecond})
	tw.Lag(time.Second)
	first, restarted := newProvider(t, tw, "inst-1"), newProvider(t, tw, "inst-1")
	ctx := context.Background()
	const n = 10
	tw.Throttle(15)
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	for i := range n {
		for _, p := range []*aws.Provider{first, first, restarted, restarted} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := p.Create(ctx, spec(fmt.Sprintf("web-%d", i), "web", opts)); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	if got := tw.Throttled(); got != 15 {
		t.Fatalf("%d calls throttled, want the 15 asked for", got)
	}
	for err := range errs {
		t.Errorf("Create: %v", err)
	}
	if got := len(tw.Instances()); got != n {
		t.Fatalf("%d creates of %d names made %d EC2 instances, want %d (0 duplicates)", 4*n, n, got, n)
	}
	listed, err := first.List(ctx, provider.ListOptions{Fleet: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != n {
		t.Fatalf("List while DescribeInstances lags: %d instances, want %d", len(listed), n)
	}
	for _, in := range listed {
		if in.State == provider.StateFailed {
			t.Errorf("%s reported Failed while EC2 lags: %s", in.Name, in.Reason)
		}
	}
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		if err := deleteEventually(first, name); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range tw.Instances() {
		if x.State != awstwin.StateTerminated && x.State != awstwin.StateShuttingDown {
			t.Errorf("after deleting every instance, %s (%s) is %s: leaked", x.ID, x.Tags["herd.dev/instance"], x.State)
		}
	}
	if got := tw.Calls()["RunInstances"]; got > 4*n+15 {
		t.Errorf("%d RunInstances calls for %d names asked 4 times with 15 throttled", got, n)
	}
}

// deleteEventually retries Delete the way the controller does while EC2 does not show a new
// instance yet, and fails after a deadline.
func deleteEventually(p provider.Provider, name string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := p.Delete(context.Background(), name)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// No capacity for the first type in any subnet launches the second type; no capacity in the first
// subnet tried launches in the other.
func TestCapacityFallback(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	p := newProvider(t, tw, "inst-1")
	ctx := context.Background()

	tw.NoCapacity("m7i.large", "")
	a, err := p.Create(ctx, spec("a-1", "a", opts))
	if err != nil {
		t.Fatal(err)
	}
	tw.RestoreCapacity()
	// herd up restarted asks again: m7i.large has capacity now, but a-1 runs as m6i.large.
	again, err := newProvider(t, tw, "inst-1").Create(ctx, spec("a-1", "a", opts))
	if err != nil || again.ProviderID != a.ProviderID {
		t.Fatalf("a-1 asked again once the first type has capacity: %s, %v; want %s, launched the first time", again.ProviderID, err, a.ProviderID)
	}
	tw.NoCapacity("", "subnet-0aaaaaaaa")
	tw.Unsupported("m6i.large")
	if _, err := p.Create(ctx, spec("b-1", "b", opts)); err != nil {
		t.Fatal(err)
	}
	got := map[string]awstwin.Instance{}
	for _, x := range tw.Instances() {
		got[x.Tags["herd.dev/instance"]] = x
	}
	if x := got["a-1"]; x.InstanceType != "m6i.large" {
		t.Errorf("no m7i.large capacity: a-1 launched as %s, want m6i.large", x.InstanceType)
	}
	if x := got["b-1"]; x.InstanceType != "m7i.large" || x.SubnetID != "subnet-0bbbbbbbb" {
		t.Errorf("no capacity in subnet-0aaaaaaaa: b-1 launched as %s in %s, want m7i.large in subnet-0bbbbbbbb", x.InstanceType, x.SubnetID)
	}
	if len(got) != 2 {
		t.Errorf("%d instances, want 2", len(got))
	}

	tw.NoCapacity("", "")
	_, err = p.Create(ctx, spec("c-1", "c", opts))
	if err == nil || !strings.Contains(err.Error(), "no capacity") || !strings.Contains(err.Error(), "m7i.large in subnet-0bbbbbbbb") {
		t.Errorf("no capacity anywhere: %v, want an error naming what was tried", err)
	}
}

// Two herd installations in one account never see, adopt or delete each other's instances, even
// under the same instance name.
func TestOtherInstallationUntouched(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	mine, theirs := newProvider(t, tw, "mine"), newProvider(t, tw, "theirs")
	ctx := context.Background()
	if _, err := theirs.Create(ctx, spec("web-1", "web", opts)); err != nil {
		t.Fatal(err)
	}
	if _, err := mine.Create(ctx, spec("web-1", "web", opts)); err != nil {
		t.Fatal(err)
	}
	if got := len(tw.Instances()); got != 2 {
		t.Fatalf("two installations creating web-1: %d instances, want 2 (one each)", got)
	}
	if err := mine.Delete(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	listed, err := mine.List(ctx, provider.ListOptions{})
	if err != nil || len(listed) != 0 {
		t.Fatalf("mine after deleting its web-1: %v, %v; want nothing", listed, err)
	}
	in, err := theirs.Get(ctx, "web-1")
	if err != nil || in.State != provider.StateReady {
		t.Fatalf("theirs after mine deleted its own web-1: %+v, %v; want theirs Ready", in, err)
	}
}

// An instance stopped or terminated from outside is Failed with EC2's reason, not gone: the
// controller replaces it. Deleted then, the terminated one is gone at once, though EC2 lists a
// terminated instance for about an hour: listed on, it would be an instance with no record,
// adopted and replaced again.
func TestTerminatedFromOutsideIsFailed(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	p := newProvider(t, tw, "inst-1")
	ctx := context.Background()
	for _, name := range []string{"x-1", "x-2", "x-3"} {
		if _, err := p.Create(ctx, spec(name, "x", opts)); err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]string{}
	for _, x := range tw.Instances() {
		ids[x.Tags["herd.dev/instance"]] = x.ID
	}
	for _, name := range []string{"x-1", "x-3"} {
		if err := tw.TerminateFromOutside(ids[name], "Server.SpotInstanceTermination", "Server.SpotInstanceTermination: Spot instance termination"); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.StopFromOutside(ids["x-2"], "Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown"); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"x-1": "terminated: Server.SpotInstanceTermination", "x-2": "stopped: Client.UserInitiatedShutdown"} {
		in, err := p.Get(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if in.State != provider.StateFailed || !strings.Contains(in.Reason, want) {
			t.Errorf("%s: %s %q, want Failed with %q", name, in.State, in.Reason, want)
		}
	}
	// EC2 lists a terminated instance for about an hour: once deleted it is gone for herd, for
	// this provider and, by its tag, for one made after a restart.
	if err := p.Delete(ctx, "x-1"); err != nil {
		t.Fatal(err)
	}
	listed := func(p *aws.Provider, name string) bool {
		t.Helper()
		ins, err := p.List(ctx, provider.ListOptions{Fleet: "x"})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(ins, func(in provider.Instance) bool { return in.Name == name })
	}
	if listed(p, "x-1") || listed(newProvider(t, tw, "inst-1"), "x-1") {
		t.Error("x-1, terminated from outside and deleted, is still listed")
	}
	// Where EC2 refuses the tag on a terminated instance, the provider that deleted it forgets it.
	tw.Deny("CreateTags")
	if err := p.Delete(ctx, "x-3"); err != nil {
		t.Fatal(err)
	}
	if listed(p, "x-3") {
		t.Error("x-3, terminated from outside and deleted while EC2 refused tags, is still listed")
	}
}

// A denied action names the IAM action to allow.
func TestUnauthorizedNamesTheAction(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	p := newProvider(t, tw, "inst-1")
	tw.Deny("RunInstances")
	_, err := p.Create(context.Background(), spec("d-1", "d", opts))
	if err == nil || !strings.Contains(err.Error(), "may not call ec2:RunInstances") {
		t.Fatalf("RunInstances denied: %v, want an error naming ec2:RunInstances", err)
	}
}

func TestValidateOptions(t *testing.T) {
	p, err := aws.New(aws.Options{Installation: "x"})
	if err != nil {
		t.Fatal(err)
	}
	path := field.NewPath("spec", "regions").Index(0).Child("options")
	good := map[string]string{"region": "eu-west-1", "instanceTypes": "m7i.large, m6i.large", "subnets": "subnet-0123456789abcdef0",
		"securityGroups": "sg-0123456789abcdef0", "instanceProfile": "arn:aws:iam::123456789012:instance-profile/herd", "ami": "ami-0123456789abcdef0",
		"endpoint": "https://ec2.eu-west-1.amazonaws.com", "targetGroup": "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/web/0123456789abcdef",
		"spot": "true", "herdUp": "https://10.0.0.5:7443"}
	if errs := p.ValidateOptions(path, good); len(errs) != 0 {
		t.Fatalf("good options refused: %v", errs)
	}
	bad := maps.Clone(good)
	bad["region"], bad["instanceTypes"], bad["subnets"], bad["ami"], bad["endpoint"], bad["zone"] = "Europe", "", "subnet-xyz", "ubuntu", "ec2.local", "a"
	bad["targetGroup"] = "arn:aws:elasticloadbalancing:us-east-1:123456789012:targetgroup/web/0123456789abcdef"
	bad["spot"], bad["herdUp"] = "yes please", "10.0.0.5:7443"
	want := []string{"options.region", "options.instanceTypes", "options.subnets", "options.ami", "options.endpoint", "options.zone",
		"options.targetGroup", "options.spot", "options.herdUp"}
	errs := p.ValidateOptions(path, bad)
	for _, w := range want {
		found := false
		for _, e := range errs {
			found = found || strings.HasSuffix(e.Field, w)
		}
		if !found {
			t.Errorf("no error at %s in %v", w, errs)
		}
	}
	name := maps.Clone(good)
	name["targetGroup"] = "web"
	if errs := p.ValidateOptions(path, name); len(errs) != 1 || !strings.Contains(errs[0].Error(), "target group's ARN") {
		t.Errorf("a target group by name: %v, want an error asking for its ARN", errs)
	}
	if _, err := p.Create(context.Background(), spec("e-1", "e", bad)); err == nil {
		t.Error("Create accepted bad options")
	}
}

func TestNewNeedsAnInstallation(t *testing.T) {
	if _, err := aws.New(aws.Options{}); err == nil {
		t.Fatal("New without an installation id succeeded")
	}
}

// herd up restarted (a new provider value on the same state directory) lists every instance by
// its tags before it creates anything, and asking for them again launches nothing.
func TestRestartAdoptsByTag(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	dir := t.TempDir()
	p, err := aws.New(aws.Options{Installation: "inst-1", Credentials: tw.Credentials(), StateDir: dir, RateLimit: 200, RateBurst: 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if _, err := p.Create(ctx, spec(fmt.Sprintf("web-%d", i), "web", opts)); err != nil {
			t.Fatal(err)
		}
	}
	restarted, err := aws.New(aws.Options{Installation: "inst-1", Credentials: tw.Credentials(), StateDir: dir, RateLimit: 200, RateBurst: 20})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := restarted.List(ctx, provider.ListOptions{Region: "r1"})
	if err != nil || len(listed) != 3 {
		t.Fatalf("List after a restart: %d instances, %v; want the 3 running", len(listed), err)
	}
	for _, in := range listed {
		if in.Labels[v1alpha1.LabelFleet] != "web" || in.Image != image || in.State != provider.StateReady {
			t.Errorf("adopted %s: labels %v, image %s, state %s", in.Name, in.Labels, in.Image, in.State)
		}
		if _, err := restarted.Create(ctx, spec(in.Name, "web", opts)); err != nil {
			t.Fatal(err)
		}
	}
	if got := len(tw.Instances()); got != 3 {
		t.Fatalf("after the restart asked again for its 3 instances: %d EC2 instances, want 3", got)
	}
}

// Every attempt of every call waits for the provider's own rate limit, the SDK's retries of a
// throttled call included: a call the limit cannot let through before its deadline fails at once,
// and EC2 never sees it.
func TestRateLimitCountsRetries(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	opts["ami"] = "ami-0123456789abcdef0"
	p, err := aws.New(aws.Options{Installation: "inst-1", Credentials: tw.Credentials(),
		RateLimit: rate.Every(time.Hour), RateBurst: 3, MaxBackoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// One token: RunInstances (refused, as the AMI is unknown to the twin, which is no matter).
	if _, err := p.Create(ctx, spec("r-1", "r", opts)); err == nil {
		t.Fatal("RunInstances of an unknown AMI succeeded")
	}
	tw.Throttle(1)
	if _, err := p.List(ctx, provider.ListOptions{}); err != nil { // two tokens: throttled, retried
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := p.Create(short, spec("r-2", "r", opts)); err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Fatalf("a fourth call within a burst of 3 an hour: %v, want the rate limit's refusal", err)
	}
	if got := tw.Calls()["DescribeInstances"]; got != 2 {
		t.Errorf("EC2 saw %d DescribeInstances calls, want 2 (the throttled one and its retry)", got)
	}
}
