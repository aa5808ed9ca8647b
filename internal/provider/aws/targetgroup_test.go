package aws_test

import (
	"context"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws"
	"herd.dev/herd/internal/provider/aws/awstwin"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// runController runs herd's controller over p, on a store of its own, until the test ends.
func runController(t *testing.T, p provider.Provider) (store.Store, *controller.Controller) {
	t.Helper()
	st := memory.New()
	ctrl, err := controller.New(controller.Options{
		Store: st, Providers: map[string]provider.Provider{aws.Name: p}, PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ctrl.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return st, ctrl
}

// putFleet stores a fleet of n instances in herd region r1 on the aws provider with opts.
func putFleet(t *testing.T, st store.Store, name string, n int32, opts map[string]string) {
	t.Helper()
	f := &v1alpha1.Fleet{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: name, Generation: 1},
		Spec: v1alpha1.FleetSpec{Image: image, Replicas: v1alpha1.Replicas{Desired: &n, Max: &n},
			Regions: []v1alpha1.Region{{Name: "r1", Provider: aws.Name, Options: opts}}},
	}
	v1alpha1.SetFleetDefaults(f, aws.Name)
	if err := store.PutObject(context.Background(), st, store.Fleets, f); err != nil {
		t.Fatal(err)
	}
}

// getFleet reads a stored fleet.
func getFleet(t *testing.T, st store.Store, name string) *v1alpha1.Fleet {
	t.Helper()
	f, err := store.GetObject[v1alpha1.Fleet](context.Background(), st, store.Fleets, name)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// scaleFleet sets a stored fleet's desired count.
func scaleFleet(t *testing.T, st store.Store, name string, n int32) {
	t.Helper()
	_, err := store.UpdateObject(context.Background(), st, store.Fleets, name, func(f *v1alpha1.Fleet) (bool, error) {
		f.Spec.Replicas.Desired = &n
		f.Metadata.Generation++
		return true, nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// await polls cond every 20ms until it holds, failing the test after 20 seconds.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("not %s: %v", what, err)
	}
}

// live are the IDs of the twin's instances that are not terminated, by instance name.
func live(tw *awstwin.Twin) map[string]string {
	out := map[string]string{}
	for _, x := range tw.Instances() {
		if x.State != awstwin.StateTerminated && x.State != awstwin.StateShuttingDown {
			out[x.Tags["herd.dev/instance"]] = x.ID
		}
	}
	return out
}

// A fleet whose region names a target group has each instance registered in it once it serves;
// scaled down, each instance leaves the group (deregistered, drained for the group's delay)
// before EC2 terminates it, and the group holds exactly the instances left.
func TestScaleDownLeavesTheTargetGroup(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{PendingDelay: 50 * time.Millisecond})
	arn := tw.AddTargetGroup(ec2Region, "web", time.Second)
	opts["targetGroup"] = arn
	p := newProvider(t, tw, "tg")
	st, ctrl := runController(t, p)

	putFleet(t, st, "web", 4, opts)
	await(t, "4 instances Ready", func() bool { ready, booting := ctrl.InstanceCounts("web"); return ready == 4 && booting == 0 })
	running := live(tw)
	if got := tw.Targets(arn); len(got) != 4 {
		t.Fatalf("4 instances serve; the target group has %v, want all 4", got)
	}
	for name, id := range running {
		if tw.Targets(arn)[id] != awstwin.TargetHealthy {
			t.Errorf("%s (%s) serves and is not healthy in the target group: %v", name, id, tw.Targets(arn))
		}
	}

	scaleFleet(t, st, "web", 1)
	await(t, "scaled down to 1", func() bool {
		recs, _, err := st.List(context.Background(), store.Instances)
		return err == nil && len(recs) == 1 && len(live(tw)) == 1
	})
	left := live(tw)
	want := map[string]string{}
	for _, id := range left {
		want[id] = awstwin.TargetHealthy
	}
	if got := tw.Targets(arn); !maps.Equal(got, want) {
		t.Errorf("scaled down to %v: the target group has %v, want only what is left", left, got)
	}
	if cut := tw.CutOff(); len(cut) != 0 {
		t.Errorf("instances terminated while the target group still sent them traffic: %v", cut)
	}
	checkCallsAllowed(t, tw)
}

// A delete interrupted between the deregistration and the termination (herd up killed while the
// target group drains the instance) is finished by herd up restarted: it finds the instance
// draining, waits until the group lets it go, terminates it, and only then reports it deleted.
func TestDeleteAfterCrashFinishesLeavingTheGroup(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	arn := tw.AddTargetGroup(ec2Region, "web", time.Second)
	opts["targetGroup"] = arn
	dir := t.TempDir()
	newP := func() *aws.Provider {
		p, err := aws.New(aws.Options{Installation: "tg", Credentials: tw.Credentials(), StateDir: dir,
			RateLimit: 200, RateBurst: 20, MaxBackoff: 20 * time.Millisecond, PollInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := newP()
	ctx := context.Background()
	if _, err := p.Create(ctx, spec("web-1", "web", opts)); err != nil {
		t.Fatal(err)
	}
	if in, err := p.Get(ctx, "web-1"); err != nil || in.State != provider.StateReady {
		t.Fatalf("web-1: %+v, %v; want Ready", in, err)
	}
	id := live(tw)["web-1"]
	if got := tw.Targets(arn)[id]; got != awstwin.TargetHealthy {
		t.Fatalf("web-1 serves; in its target group it is %q, want healthy", got)
	}

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := p.Delete(short, "web-1"); err == nil {
		t.Fatal("Delete returned before the target group's deregistration delay ended")
	}
	if got := tw.Targets(arn)[id]; got != awstwin.TargetDraining || live(tw)["web-1"] != id {
		t.Fatalf("herd up stopped during the drain: web-1 is %q in the group and running=%v; want draining and running", got, live(tw)["web-1"] == id)
	}

	restarted := newP()
	if in, err := restarted.Get(ctx, "web-1"); err != nil || in.State != provider.StateDeleting {
		t.Fatalf("after the restart web-1 is %+v, %v; want Deleting", in, err)
	}
	if err := restarted.Delete(ctx, "web-1"); err != nil {
		t.Fatal(err)
	}
	if len(live(tw)) != 0 || len(tw.Targets(arn)) != 0 {
		t.Errorf("after the restarted delete: running %v, target group %v; want neither", live(tw), tw.Targets(arn))
	}
	if cut := tw.CutOff(); len(cut) != 0 {
		t.Errorf("terminated before the group's deregistration delay ended: %v", cut)
	}
}

// A target group that does not exist refuses the launch with the option to fix; one that the
// credentials may not register in leaves a running instance Booting with the action to allow.
func TestTargetGroupErrorsSayWhatToFix(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	p := newProvider(t, tw, "tg")
	ctx := context.Background()
	missing := maps.Clone(opts)
	missing["targetGroup"] = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/none/0123456789abcdef"
	if _, err := p.Create(ctx, spec("m-1", "m", missing)); err == nil || !strings.Contains(err.Error(), "targetGroup option") {
		t.Errorf("a target group that does not exist: %v, want an error naming the targetGroup option", err)
	}
	if n := len(tw.Instances()); n != 0 {
		t.Errorf("%d instances launched for a target group that does not exist, want 0", n)
	}

	opts["targetGroup"] = tw.AddTargetGroup(ec2Region, "web", 0)
	tw.Deny("RegisterTargets")
	if _, err := p.Create(ctx, spec("d-1", "d", opts)); err != nil {
		t.Fatal(err)
	}
	in, err := p.Get(ctx, "d-1")
	if err != nil || in.State != provider.StateBooting || !strings.Contains(in.Reason, "may not call elasticloadbalancing:RegisterTargets") {
		t.Errorf("registration denied: %s %q, %v; want Booting naming elasticloadbalancing:RegisterTargets", in.State, in.Reason, err)
	}
}
