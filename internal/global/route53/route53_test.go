package route53

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func fleet(policy v1alpha1.RoutingPolicy) *v1alpha1.Fleet {
	f := &v1alpha1.Fleet{
		Metadata: v1alpha1.ObjectMeta{Name: "hello"},
		Spec: v1alpha1.FleetSpec{
			Listeners: []v1alpha1.Listener{{Port: 8080, InstancePort: 30080}},
			Regions:   []v1alpha1.Region{{Name: "eu"}, {Name: "us"}, {Name: "ap"}},
			Global:    &v1alpha1.Global{Hostname: "hello.herd.test", Policy: policy},
		},
	}
	switch policy {
	case v1alpha1.PolicyWeighted:
		f.Spec.Global.Weights = map[string]int32{"eu": 3, "us": 1}
	case v1alpha1.PolicyGeo:
		f.Spec.Global.Geo = &v1alpha1.GeoRouting{CIDRs: map[string]string{"10.216.0.0/25": "eu", "10.216.0.128/25": "us", "2001:db8::/32": "ap"}, Default: "us"}
	}
	v1alpha1.SetFleetDefaults(f, "local")
	return f
}

var addresses = map[string][]netip.Addr{
	"eu": {netip.MustParseAddr("10.216.0.1"), netip.MustParseAddr("2001:db8:1::1")},
	"us": {netip.MustParseAddr("10.216.0.2")},
	"ap": {netip.MustParseAddr("10.216.0.3")},
}

// TestGolden compares the export of each policy with testdata/<policy>.json (go test -update
// rewrites them; review the diff).
func TestGolden(t *testing.T) {
	for _, p := range []v1alpha1.RoutingPolicy{v1alpha1.PolicyFailover, v1alpha1.PolicyWeighted, v1alpha1.PolicyGeo, v1alpha1.PolicyLatency} {
		t.Run(string(p), func(t *testing.T) {
			out, err := FromFleet(fleet(p), Options{Addresses: addresses, AWSRegions: map[string]string{"eu": "eu-west-1", "us": "us-east-1", "ap": "ap-southeast-1"}})
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(out, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			file := filepath.Join("testdata", string(p)+".json")
			if *update {
				if err := os.WriteFile(file, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(file)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("export differs from %s (go test -update rewrites it):\n%s", file, got)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	f := fleet(v1alpha1.PolicyFailover)
	if _, err := FromFleet(f, Options{Addresses: map[string][]netip.Addr{"eu": addresses["eu"]}}); err == nil || !strings.Contains(err.Error(), "region us of fleet hello has no load balancer address") {
		t.Errorf("missing address: %v", err)
	}
	f.Spec.Global = nil
	if _, err := FromFleet(f, Options{Addresses: addresses}); err == nil || !strings.Contains(err.Error(), "no spec.global") {
		t.Errorf("no spec.global: %v", err)
	}
}
