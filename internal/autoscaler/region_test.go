package autoscaler

import (
	"context"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
)

// regionLoad answers RegionLoad from the fake load's per-region figures: "fleet/region" in
// fakeView's and fakeLoad's maps.
type regionLoad struct{ *fakeLoad }

func (r regionLoad) RegionLoad(fleet, region string, _ time.Duration) (Load, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked++
	return Load{RequestsPerSecond: r.byRegion[fleet+"/"+region]}, true
}

type regionView struct{ *fakeView }

func (v regionView) RegionInstanceCounts(fleet, region string) (int, int) {
	return v.InstanceCounts(fleet + "/" + region)
}

// Each region of a fleet in several regions is scaled from its own load: a busy region grows, a
// quiet one keeps its count, and the fleet-wide count is not touched.
func TestLoopScalesEachRegionFromItsOwnLoad(t *testing.T) {
	load, view := &fakeLoad{byRegion: map[string]float64{}}, &fakeView{ready: map[string]int{}}
	e := startLoopEnv(t, nil, load, view, regionLoad{load}, regionView{view})
	f := autoscaled("web", v1alpha1.MetricRequestsPerSecond, 10, 1, 10, time.Minute)
	f.Spec.Regions = []v1alpha1.Region{{Name: "eu", Provider: "fake"}, {Name: "us", Provider: "fake"}}
	e.put(f)
	view.set("web/eu", 1)
	view.set("web/us", 1)
	load.mu.Lock()
	load.byRegion["web/eu"], load.byRegion["web/us"] = 40, 10 // 4x the target in eu, 1x in us
	load.mu.Unlock()
	for range 4 {
		e.step()
	}
	got, err := store.GetObject[v1alpha1.Fleet](context.Background(), e.store, store.Fleets, "web")
	if err != nil {
		t.Fatal(err)
	}
	if eu := got.RegionReplicas("eu"); *eu.Desired != 4 {
		t.Errorf("region eu desired %d at 4x the target, want 4", *eu.Desired)
	}
	if us := got.Spec.Regions[1].Replicas; us != nil && us.Desired != nil && *us.Desired != 1 {
		t.Errorf("region us desired %d at 1x the target, want it left at 1", *us.Desired)
	}
	if d := *got.Spec.Replicas.Desired; d != 1 {
		t.Errorf("spec.replicas.desired %d, want 1: the regions' counts are their own", d)
	}
	evs := e.events.Events()
	if len(evs) == 0 || evs[0].Reason != ReasonScaledOut || !strings.Contains(evs[0].Message, "region eu") {
		t.Errorf("events %+v, want a ScaledOut naming region eu", evs)
	}
}
