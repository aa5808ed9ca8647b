package aws_test

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"golang.org/x/sync/errgroup"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws"
	"herd.dev/herd/internal/provider/aws/awstwin"
)

// A resync (every fleet listed, the orphan collector's list of everything, a Get of every
// instance) costs one DescribeInstances per EC2 region, not one per fleet or per instance, and
// each list still holds exactly its fleet's instances.
func TestListsAreBatchedAcrossFleets(t *testing.T) {
	tw, eu := setup(t, awstwin.Options{})
	tw.AddImage("us-east-1", "herd-node", map[string]string{"herd.dev/image": image})
	us := maps.Clone(eu)
	us["region"] = "us-east-1"
	p := newProvider(t, tw, "inst-1")
	ctx := context.Background()
	const fleets, perFleet = 6, 4
	want := map[string]int{}
	for f := range fleets {
		fleet := fmt.Sprintf("f%d", f)
		for i := range perFleet {
			region, opts := "r1", eu
			if i%2 == 1 {
				region, opts = "r2", us
			}
			s := spec(fmt.Sprintf("%s-%d", fleet, i), fleet, opts)
			s.Region, s.Labels[v1alpha1.LabelRegion] = region, region
			if _, err := p.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
			want[fleet]++
		}
	}
	// The first look after the launches sees every instance running.
	if all, err := p.List(ctx, provider.ListOptions{}); err != nil || len(all) != fleets*perFleet {
		t.Fatalf("List: %d instances, %v; want %d", len(all), err, fleets*perFleet)
	}
	before := tw.Calls()["DescribeInstances"]
	for fleet, n := range want {
		listed, err := p.List(ctx, provider.ListOptions{Fleet: fleet})
		if err != nil {
			t.Fatal(err)
		}
		if len(listed) != n {
			t.Errorf("fleet %s: %d instances listed, want %d", fleet, len(listed), n)
		}
		for _, in := range listed {
			if in.Labels[v1alpha1.LabelFleet] != fleet || in.State != provider.StateReady {
				t.Errorf("fleet %s listed %s of fleet %s, %s", fleet, in.Name, in.Labels[v1alpha1.LabelFleet], in.State)
			}
			got, err := p.Get(ctx, in.Name)
			if err != nil || got.Name != in.Name {
				t.Errorf("Get %s: %+v, %v", in.Name, got, err)
			}
		}
		if r2, err := p.List(ctx, provider.ListOptions{Fleet: fleet, Region: "r2"}); err != nil || len(r2) != n/2 {
			t.Errorf("fleet %s in r2: %d instances, %v; want %d", fleet, len(r2), err, n/2)
		}
	}
	if _, err := p.List(ctx, provider.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := tw.Calls()["DescribeInstances"] - before; got != 0 {
		t.Errorf("a resync of %d fleets in 2 EC2 regions made %d DescribeInstances calls after the first look, want 0 (its snapshots serve it)", fleets, got)
	}
	if got := tw.Calls()["DescribeInstances"]; got != 2 {
		t.Errorf("%d DescribeInstances calls in all, want 2: one per EC2 region", got)
	}
}

// The deletes of a scale-down share their EC2 calls: 30 instances deleted at once are tagged
// and terminated in a few CreateTags and TerminateInstances calls (the first goes alone, the
// others together after it), not 30 of each, and every one is terminated.
func TestDeletesAreBatched(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	// Bursts of one: while the first call of each kind waits for its turn, the others gather.
	p, err := aws.New(aws.Options{Installation: "inst-1", Credentials: tw.Credentials(), StateDir: t.TempDir(),
		RateLimit: 20, RateBurst: 1, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 30
	for i := range n {
		if _, err := p.Create(ctx, spec(fmt.Sprintf("b-%d", i), "b", opts)); err != nil {
			t.Fatal(err)
		}
	}
	var g errgroup.Group
	for i := range n {
		g.Go(func() error { return p.Delete(ctx, fmt.Sprintf("b-%d", i)) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	for _, x := range tw.Instances() {
		if x.State != awstwin.StateTerminated || x.Tags["herd.dev/deleting"] != "true" {
			t.Errorf("%s after its delete: %s, deleting tag %q; want terminated and tagged", x.Tags["herd.dev/instance"], x.State, x.Tags["herd.dev/deleting"])
		}
	}
	calls := tw.Calls()
	if calls["TerminateInstances"] > 3 || calls["CreateTags"] > 3 {
		t.Errorf("%d deletes at once made %d TerminateInstances and %d CreateTags calls, want at most 3 of each", n, calls["TerminateInstances"], calls["CreateTags"])
	}
}

// The launches of a scale-up ask DescribeImages once for their image in their region, not once
// each; the answer serves for AMIMaxAge, so that a new AMI registered for the digest is found
// once it has passed, and an AMI deregistered meanwhile is looked up again at once.
func TestAMIFoundOncePerDigest(t *testing.T) {
	tw, opts := setup(t, awstwin.Options{})
	var offset atomic.Int64
	p, err := aws.New(aws.Options{Installation: "inst-1", Credentials: tw.Credentials(), StateDir: t.TempDir(),
		RateLimit: 200, RateBurst: 20, AMIMaxAge: time.Minute,
		Now: func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var g errgroup.Group
	for i := range 20 {
		g.Go(func() error { _, err := p.Create(ctx, spec(fmt.Sprintf("a-%d", i), "a", opts)); return err })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := tw.Calls()["DescribeImages"]; got != 1 {
		t.Errorf("20 launches of one image asked DescribeImages %d times, want 1", got)
	}

	// The image's AMI is replaced: deregistered, and a new one registered with the digest.
	first := tw.Instances()[0].ImageID
	ec2c := tw.Client(ec2Region)
	if _, err := ec2c.DeregisterImage(ctx, &ec2.DeregisterImageInput{ImageId: &first}); err != nil {
		t.Fatal(err)
	}
	second := tw.AddImage(ec2Region, "herd-node-2", map[string]string{"herd.dev/image": image})
	if _, err := p.Create(ctx, spec("a-20", "a", opts)); err != nil {
		t.Fatalf("a launch after the AMI found was deregistered: %v", err)
	}
	third := tw.AddImage(ec2Region, "herd-node-3", map[string]string{"herd.dev/image": image})
	if _, err := ec2c.DeregisterImage(ctx, &ec2.DeregisterImageInput{ImageId: &second}); err != nil {
		t.Fatal(err)
	}
	offset.Store(int64(2 * time.Minute))
	runs := tw.Calls()["RunInstances"]
	if _, err := p.Create(ctx, spec("a-21", "a", opts)); err != nil {
		t.Fatal(err)
	}
	if got := tw.Calls()["RunInstances"] - runs; got != 1 {
		t.Errorf("a launch once the AMI found is older than AMIMaxAge made %d RunInstances, want 1: the new AMI found first", got)
	}
	got := map[string]string{}
	for _, x := range tw.Instances() {
		got[x.Tags["herd.dev/instance"]] = x.ImageID
	}
	if got["a-20"] != second || got["a-21"] != third {
		t.Errorf("a-20 booted %s and a-21 %s, want the AMIs registered for the digest since: %s and %s", got["a-20"], got["a-21"], second, third)
	}
}
