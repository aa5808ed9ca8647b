package aws_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/provider"
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
