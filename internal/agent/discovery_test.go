package agent

import (
	"net/netip"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// With discovery, an image with cluster DNS gets the ConfigMap its CoreDNS imports, applied before
// the bundle's objects (so before the add-on's Deployment), forwarding the zone to herd's DNS at
// the address given; an image without cluster DNS, or an agent without discovery, gets nothing.
func TestWithDiscovery(t *testing.T) {
	bundle, err := decodeManifests([]manifestFile{{name: "addons/coredns.yaml", data: []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: coredns, namespace: kube-system}\n")}})
	if err != nil {
		t.Fatal(err)
	}
	d := &Discovery{Zone: "herd.internal", Server: netip.MustParseAddrPort("10.213.1.1:5354")}
	objs := applyOrder(withDiscovery(bundle, d, true))
	if len(objs) != 2 || objs[0].obj.GetKind() != "ConfigMap" || objs[0].obj.GetName() != DiscoveryConfigMap || objs[0].obj.GetNamespace() != "kube-system" {
		t.Fatalf("objects %v, want the kube-system/%s ConfigMap first", objs, DiscoveryConfigMap)
	}
	data, _, _ := unstructured.NestedString(objs[0].obj.Object, "data", DiscoveryKey)
	want := "herd.internal.:53 {\n    errors\n    forward . 10.213.1.1:5354\n    cache 5\n}\n"
	if data != want {
		t.Errorf("server block:\n%s\nwant:\n%s", data, want)
	}
	if got := withDiscovery(bundle, d, false); len(got) != 1 {
		t.Errorf("an image without cluster DNS got %d objects, want the bundle's 1", len(got))
	}
	if got := withDiscovery(bundle, nil, true); len(got) != 1 {
		t.Errorf("an agent without discovery got %d objects, want the bundle's 1", len(got))
	}
}

// A bad zone or server is refused at start, naming the flag.
func TestDiscoveryCheck(t *testing.T) {
	for _, c := range []struct {
		d    Discovery
		flag string
	}{
		{Discovery{Zone: "herd..internal", Server: netip.MustParseAddrPort("10.0.0.1:53")}, "--discovery-zone"},
		{Discovery{Zone: "herd.internal."}, "--discovery-dns"},
		{Discovery{Zone: "herd.internal.", Server: netip.MustParseAddrPort("0.0.0.0:5354")}, "--discovery-dns"},
	} {
		if err := c.d.check(); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: error %v, want one naming %s", c.d, err, c.flag)
		}
	}
	if err := (Discovery{Zone: "herd.internal.", Server: netip.MustParseAddrPort("10.213.0.1:5354")}).check(); err != nil {
		t.Errorf("a good config: %v", err)
	}
}
