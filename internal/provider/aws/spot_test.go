package aws_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/agent/ec2meta"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

// spotAgents are agents (readiness_test.go) that are ready once launched and, like herd-agent
// --ec2, watch their instance's metadata for a spot interruption notice and stop on one: their
// /readyz then says so.
type spotAgents struct {
	*agents
	tw  *awstwin.Twin
	ctx context.Context
}

func newSpotAgents(t *testing.T) (*spotAgents, *agentauth.Keyring) {
	keys, err := agentauth.NewKeyring([]byte(strings.Repeat("k", 32)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return &spotAgents{agents: &agents{t: t, keys: keys, readyz: map[string]string{}, servers: map[string]*http.Server{}, down: map[string]bool{}}, ctx: ctx}, keys
}

func (a *spotAgents) Launch(in awstwin.Instance, image awstwin.Image) (string, error) {
	name := in.Tags["herd.dev/instance"]
	a.set(name, "ok")
	go func() {
		// The twin serves the instance's metadata once RunInstances has launched it.
		var url string
		if wait.PollUntilContextCancel(a.ctx, 10*time.Millisecond, true, func(context.Context) (bool, error) {
			url = a.tw.MetadataURL(in.ID)
			return url != "", nil
		}) != nil {
			return
		}
		n, err := ec2meta.New(url).WatchInterruption(a.ctx, 20*time.Millisecond, nil)
		if err == nil {
			a.set(name, fmt.Sprintf("stopping: spot interruption notice: EC2 will %s the instance at %s", n.Action, n.Time.Format(time.RFC3339)))
		}
	}()
	return a.agents.Launch(in, image)
}

// spotSetup is a twin whose instances run spot agents, a provider of it, and spot options.
func spotSetup(t *testing.T) (*awstwin.Twin, *aws.Provider, map[string]string) {
	be, keys := newSpotAgents(t)
	tw, opts := setup(t, awstwin.Options{Backend: be})
	be.tw = tw
	opts["spot"] = "true"
	p, err := aws.New(aws.Options{Installation: "spot", Credentials: tw.Credentials(), StateDir: t.TempDir(),
		AgentKeys: keys, RateLimit: 200, RateBurst: 20, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return tw, p, opts
}

// With spot: true instances launch as spot instances; when spot has no capacity for any of the
// region's types and subnets, they launch on demand.
func TestSpotFallsBackToOnDemand(t *testing.T) {
	tw, p, opts := spotSetup(t)
	ctx := context.Background()
	tw.NoSpotCapacity(true)
	if _, err := p.Create(ctx, spec("od-1", "s", opts)); err != nil {
		t.Fatalf("no spot capacity: %v, want an on-demand launch", err)
	}
	tw.NoSpotCapacity(false)
	if _, err := p.Create(ctx, spec("sp-1", "s", opts)); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, x := range tw.Instances() {
		got[x.Tags["herd.dev/instance"]] = x.Lifecycle
	}
	if got["od-1"] != "" || got["sp-1"] != "spot" || len(got) != 2 {
		t.Errorf("lifecycles %v, want od-1 on demand (no spot capacity) and sp-1 spot", got)
	}
}

// A spot instance whose interruption notice its agent read is going: the provider says it is
// Deleting, with the notice, while EC2 still runs it, so that the controller launches its
// replacement before EC2 takes it; and so it does, with no instance reported Failed.
func TestSpotInterruptionIsReplacedBeforeItGoes(t *testing.T) {
	tw, p, opts := spotSetup(t)
	ctx := context.Background()
	if _, err := p.Create(ctx, spec("alone-1", "alone", opts)); err != nil {
		t.Fatal(err)
	}
	notice := time.Now().Add(2 * time.Minute).UTC().Truncate(time.Second)
	if err := tw.InterruptSpot(live(tw)["alone-1"], "terminate", notice); err != nil {
		t.Fatal(err)
	}
	var in provider.Instance
	await(t, "alone-1 going", func() bool {
		var err error
		in, err = p.Get(ctx, "alone-1")
		return err == nil && in.State != provider.StateReady
	})
	if in.State != provider.StateDeleting || !strings.Contains(in.Reason, "spot interruption notice") {
		t.Fatalf("alone-1 with a spot interruption notice: %s %q, want Deleting with the notice", in.State, in.Reason)
	}

	st, ctrl := runController(t, p)
	putFleet(t, st, "web", 2, opts)
	await(t, "2 instances Ready", func() bool { ready, booting := ctrl.InstanceCounts("web"); return ready == 2 && booting == 0 })
	before := live(tw)
	victim := ""
	for name, id := range before {
		if strings.HasPrefix(name, "web-") {
			victim = name
			if err := tw.InterruptSpot(id, "terminate", notice); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	await(t, "the interrupted instance replaced", func() bool {
		ready, booting := ctrl.InstanceCounts("web")
		_, running := live(tw)[victim]
		return ready == 2 && booting == 0 && !running
	})
	for _, x := range tw.Instances() {
		name := x.Tags["herd.dev/instance"]
		if _, old := before[name]; !old && strings.HasPrefix(name, "web-") && !x.LaunchTime.Before(notice) {
			t.Errorf("the replacement %s launched at %s, not before EC2 takes %s at %s", name, x.LaunchTime, victim, notice)
		}
	}
	f := getFleet(t, st, "web")
	if h := f.Status.Healing; h != nil && (h.Failures > 0 || h.LastFailure != "") {
		t.Errorf("the interruption went through healing as a failure: %+v", h)
	}
}
