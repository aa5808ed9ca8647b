package e2e

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/time/rate"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/provider/aws/awstwin"
	"herd.dev/herd/internal/provider/aws/twinlocal"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

// The twin's EC2 region and the instance types the fleet tries, in order.
const (
	twinRegion    = "eu-west-1"
	twinFirstType = "m7i.large"
	twinNextType  = "m6i.large"
	// twinLag is how long DescribeInstances leaves a new instance out during the scale-up.
	twinLag = 20 * time.Second
	// The throttling storm of the scale-up: the twinStorm calls after it starts are answered with
	// RequestLimitExceeded (within the SDK's 8 attempts, so that its backoff absorbs them), and
	// then every call beyond twinStormRate a second, as EC2's token bucket does when an account's
	// callers spend it.
	twinStorm     = 6
	twinStormRate = 2
)

// twinCloud is the AWS twin, its EC2 instances real local instances (twinlocal) booted from the
// hello image in herd up's image store.
type twinCloud struct {
	e       *env
	be      *twinlocal.Backend
	tw      *awstwin.Twin
	dataDir string // twinlocal's local provider's: EC2's hosts
	tg      string // the fleet's target group
	// throttledBefore is how many calls the twin had throttled when the storm began.
	throttledBefore int
}

var _ cloud = (*twinCloud)(nil)

// startTwin starts the twin, its log in the test's directory. The AMI of the hello image is
// added once it is built (prepare).
func startTwin(e *env) *twinCloud {
	t := e.t
	logf, err := os.Create(filepath.Join(e.dir, "twin.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	c := &twinCloud{e: e, dataDir: filepath.Join(e.dir, "ec2")}
	c.be, err = twinlocal.Start(t, twinlocal.Options{
		DataDir: c.dataDir, ImagesDir: image.StoreDir(e.data), HerdBinary: e.bin,
		Logger: slog.New(slog.NewTextHandler(logf, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	c.tw = c.be.Twin()
	c.tg = c.tw.AddTargetGroup(twinRegion, awsFleet, time.Second)
	return c
}

// prepare registers the AMI of the hello image as herd image push aws would: tagged with the
// image's digest, which the aws provider finds it by.
func (c *twinCloud) prepare() {
	digest, err := image.NewStore(image.StoreDir(c.e.data)).Resolve("hello")
	if err != nil {
		c.e.t.Fatal(err)
	}
	c.tw.AddImage(twinRegion, "hello", map[string]string{twinlocal.ImageTag: digest})
}

func (c *twinCloud) regionOptions() map[string]string {
	return map[string]string{
		"region": twinRegion, "endpoint": c.tw.URL, "instanceTypes": twinFirstType + "," + twinNextType,
		"subnets": "subnet-0aaaaaaaa,subnet-0bbbbbbbb", "securityGroups": "sg-0123456789abcdef0",
		"targetGroup": c.tg, "spot": "true",
	}
}

// upEnv gives herd up the twin's credentials through the SDK's default chain, and nothing
// else of the chain: no profile of the machine's, no instance metadata.
func (c *twinCloud) upEnv() []string {
	none := filepath.Join(c.e.dir, "no-aws-config")
	return []string{
		"AWS_ACCESS_KEY_ID=" + awstwin.DefaultAccessKeyID, "AWS_SECRET_ACCESS_KEY=" + awstwin.DefaultSecretAccessKey,
		"AWS_SESSION_TOKEN=", "AWS_PROFILE=", "AWS_CONFIG_FILE=" + none, "AWS_SHARED_CREDENTIALS_FILE=" + none,
		"AWS_EC2_METADATA_DISABLED=true",
	}
}

// fleetInstances returns the twin's instances of the fleet, terminated ones included.
func (c *twinCloud) fleetInstances() []awstwin.Instance {
	var out []awstwin.Instance
	for _, in := range c.tw.Instances() {
		if in.Tags[v1alpha1.LabelFleet] == awsFleet {
			out = append(out, in)
		}
	}
	return out
}

func (c *twinCloud) instances() ([]cloudInstance, error) {
	var out []cloudInstance
	for _, in := range c.fleetInstances() {
		if in.State != awstwin.StateShuttingDown && in.State != awstwin.StateTerminated {
			out = append(out, cloudInstance{ID: in.ID, Name: in.Tags["herd.dev/instance"], Type: in.InstanceType, State: in.State})
		}
	}
	return out, nil
}

func (c *twinCloud) targets() (map[string]string, error) { return c.tw.Targets(c.tg), nil }

func (c *twinCloud) terminate(id string) error {
	return c.tw.TerminateFromOutside(id, "Client.UserInitiatedShutdown", "Client.UserInitiatedShutdown: User initiated shutdown")
}

// interruptSpot gives the instance EC2's two minutes' notice.
func (c *twinCloud) interruptSpot(id string) error {
	return c.tw.InterruptSpot(id, "terminate", time.Now().Add(2*time.Minute))
}

// runInstances is how many RunInstances calls the twin got.
func (c *twinCloud) runInstances() int { return c.tw.Calls()["RunInstances"] }

// describeInstances is how many DescribeInstances calls the twin got.
func (c *twinCloud) describeInstances() int { return c.tw.Calls()["DescribeInstances"] }

// noCapacityOnFirstType makes the first instance type run out of capacity in every subnet.
func (c *twinCloud) noCapacityOnFirstType() { c.tw.NoCapacity(twinFirstType, "") }

// checkLaunchedOnSecondType checks that every instance launched on the next type, and gives the
// first type its capacity back.
func (c *twinCloud) checkLaunchedOnSecondType() {
	for _, in := range c.fleetInstances() {
		if in.InstanceType != twinNextType {
			c.e.t.Errorf("%s launched as %s while %s had no capacity, want %s", in.ID, in.InstanceType, twinFirstType, twinNextType)
		}
	}
	c.e.t.Logf("InsufficientInstanceCapacity on %s: every instance launched on %s", twinFirstType, twinNextType)
	c.tw.RestoreCapacity()
}

// storm starts a throttling storm and DescribeInstances' lag.
func (c *twinCloud) storm() {
	c.throttledBefore = c.tw.Throttled()
	c.tw.Lag(twinLag)
	c.tw.Throttle(twinStorm)
	c.tw.RateLimit(twinStormRate, twinStormRate)
}

// checkStorm checks, once the scaled-up fleet's instances run, that the storm hit herd's calls,
// and returns how many instance names were launched more than once; the storm and the lag end.
func (c *twinCloud) checkStorm() (duplicates int) {
	t := c.e.t
	c.calm()
	throttled := c.tw.Throttled() - c.throttledBefore
	if throttled == 0 {
		t.Errorf("the throttling storm answered none of herd's calls with RequestLimitExceeded")
	}
	launched := map[string][]string{}
	for _, in := range c.fleetInstances() {
		name := in.Tags["herd.dev/instance"]
		launched[name] = append(launched[name], in.ID)
	}
	for name, ids := range launched {
		if len(ids) > 1 {
			duplicates++
			t.Errorf("%s launched %d times: %s", name, len(ids), strings.Join(ids, ", "))
		}
	}
	t.Logf("the scale-up went through %d throttled calls and %s of DescribeInstances lag", throttled, twinLag)
	return duplicates
}

// calm ends every fault the twin injects.
func (c *twinCloud) calm() {
	c.tw.Lag(0)
	c.tw.Throttle(0)
	c.tw.RateLimit(rate.Inf, 0)
	c.tw.RestoreCapacity()
}

// stopped deletes every instance the twin still runs and the regions' networks, and returns
// what they were on the host, to check that nothing of them is left.
func (c *twinCloud) stopped() localtest.Owned {
	if err := c.be.Close(); err != nil {
		c.e.t.Errorf("stop the twin's instances: %v", err)
	}
	lp := c.be.Local()
	router, internet, veth := lp.Lab().RegionHostNames(twinRegion)
	o := localtest.Owned{
		Dirs: []string{c.dataDir}, Netns: []string{router, internet},
		Links: []string{veth, lp.BridgeName(twinRegion)},
	}
	for _, in := range c.tw.Instances() {
		ns, hostVeth, cg := local.HostNames(in.ID)
		o.Netns = append(o.Netns, ns)
		o.Links = append(o.Links, hostVeth)
		o.Cgroups = append(o.Cgroups, strings.TrimPrefix(cg, "/"))
		o.Gone = append(o.Gone, lp.InstanceDir(in.ID))
	}
	return o
}
