package v1alpha1

import "testing"

func TestRegionReplicas(t *testing.T) {
	p := func(v int32) *int32 { return &v }
	for _, tc := range []struct {
		name              string
		fleet, region     Replicas
		min, max, desired int32
	}{
		{"no override: the fleet's", Replicas{Min: p(1), Max: p(5), Desired: p(3)}, Replicas{}, 1, 5, 3},
		{"desired only", Replicas{Min: p(1), Max: p(5), Desired: p(3)}, Replicas{Desired: p(4)}, 1, 5, 4},
		{"desired 0 lowers the fleet's min", Replicas{Min: p(1), Max: p(5), Desired: p(3)}, Replicas{Desired: p(0)}, 0, 5, 0},
		{"desired above the fleet's max raises max", Replicas{Min: p(1), Max: p(5), Desired: p(3)}, Replicas{Desired: p(8)}, 1, 8, 8},
		{"max below the fleet's desired clamps it", Replicas{Min: p(3), Max: p(5), Desired: p(3)}, Replicas{Max: p(2)}, 2, 2, 2},
		{"min above the fleet's desired raises it", Replicas{Min: p(1), Max: p(5), Desired: p(2)}, Replicas{Min: p(4)}, 4, 5, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.region
			f := &Fleet{Spec: FleetSpec{Replicas: tc.fleet, Regions: []Region{{Name: "a"}, {Name: "b", Replicas: &r}}}}
			got := f.RegionReplicas("b")
			if *got.Min != tc.min || *got.Max != tc.max || *got.Desired != tc.desired {
				t.Errorf("got min %d max %d desired %d, want %d %d %d", *got.Min, *got.Max, *got.Desired, tc.min, tc.max, tc.desired)
			}
			if a := f.RegionReplicas("a"); *a.Desired != *tc.fleet.Desired || *a.Min != *tc.fleet.Min || *a.Max != *tc.fleet.Max {
				t.Errorf("region without override: %d/%d/%d, want the fleet's", *a.Min, *a.Max, *a.Desired)
			}
		})
	}
}

func TestRegionOrder(t *testing.T) {
	f := &Fleet{Spec: FleetSpec{Regions: []Region{{Name: "eu"}, {Name: "us"}, {Name: "ap"}}}}
	if got := f.RegionOrder(); len(got) != 3 || got[0] != "eu" || got[2] != "ap" {
		t.Errorf("default order %v", got)
	}
	f.Spec.Rollout.RegionOrder = []string{"ap", "eu"}
	if got := f.RegionOrder(); len(got) != 3 || got[0] != "ap" || got[1] != "eu" || got[2] != "us" {
		t.Errorf("declared order %v, want [ap eu us]", got)
	}
}
