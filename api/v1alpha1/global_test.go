package v1alpha1

import (
	"os"
	"slices"
	"testing"
)

func TestGlobalDefaults(t *testing.T) {
	data, err := os.ReadFile("testdata/valid-global.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs, err := DecodeAndValidate(data, "local", "v1.33.13")
	if err != nil {
		t.Fatal(err)
	}
	g := docs[0].Object.(*Fleet).Spec.Global
	if g.Hostname != "web.herd.test" {
		t.Errorf("hostname %q, want the trailing dot dropped", g.Hostname)
	}
	if g.TTL.Duration != DefaultGlobalTTL || *g.MinHealthyInstances != 1 {
		t.Errorf("ttl %s minHealthyInstances %d, want 5s and 1", g.TTL.Duration, *g.MinHealthyInstances)
	}
	if !slices.Equal(g.FailoverOrder, []string{"eu", "us"}) {
		t.Errorf("failoverOrder %v, want the order of spec.regions", g.FailoverOrder)
	}
	if g.LatencyFallback != PolicyGeo {
		t.Errorf("latencyFallback %q, want geo when geo is set", g.LatencyFallback)
	}

	f := &Fleet{Spec: FleetSpec{Regions: []Region{{Name: "a"}, {Name: "b"}}, Global: &Global{Hostname: "x.herd.test", Policy: PolicyWeighted}}}
	SetFleetDefaults(f, "fake")
	if f.Spec.Global.Weights["a"] != 1 || f.Spec.Global.Weights["b"] != 1 {
		t.Errorf("weights %v, want 1 for every region", f.Spec.Global.Weights)
	}
	if errs := globalFieldErrors(&f.Spec); len(errs) != 0 {
		t.Errorf("defaulted weighted spec: %v", errs)
	}
	f.Spec.Global.Weights = map[string]int32{"a": 0, "b": 0}
	if errs := globalFieldErrors(&f.Spec); len(errs) != 1 || errs[0].Field != "spec.global.weights" {
		t.Errorf("all weights 0: %v, want one error on spec.global.weights", errs)
	}
	f.Spec.Global = &Global{Hostname: "x.herd.test", Policy: PolicyGeo}
	SetFleetDefaults(f, "fake")
	if errs := globalFieldErrors(&f.Spec); len(errs) != 1 || errs[0].Field != "spec.global.geo.cidrs" {
		t.Errorf("geo without cidrs: %v, want one error on spec.global.geo.cidrs", errs)
	}
}
