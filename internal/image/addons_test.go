package image

import (
	"strings"
	"testing"

	"herd.dev/herd/internal/addons"
)

// TestIntegrationDNSAddon builds an image with the DNS add-on on (the default): CoreDNS is built
// from its pinned source with the go tool, which downloads its modules the first time.
func TestIntegrationDNSAddon(t *testing.T) {
	if testing.Short() {
		t.Skip("builds CoreDNS from source: skipped under -short")
	}
	file := fixture(t, map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "  addons: {dns: false}", "", 1)})
	b, lines := build(t, file, newStore(t))
	if !strings.Contains(strings.Join(lines, "\n"), "add-on dns: building coredns v1.12.0 from source") {
		t.Errorf("no progress line for the add-on:\n%s", strings.Join(lines, "\n"))
	}
	if b.Config.ClusterDNS != addons.ClusterDNS.String() {
		t.Errorf("clusterDNS = %q, want %s", b.Config.ClusterDNS, addons.ClusterDNS)
	}
	if len(b.Config.Manifests) == 0 || b.Config.Manifests[0].File != "addons/coredns.yaml" {
		t.Fatalf("manifests %+v: want addons/coredns.yaml first, before the workload's", b.Config.Manifests)
	}
	var refs []string
	for _, im := range b.Config.Images {
		refs = append(refs, im.Ref)
	}
	if got := strings.Join(refs, " "); got != "hello:v1 herd.dev/addons/coredns:v1.12.0 "+PauseImage {
		t.Errorf("images %s: want the app's, CoreDNS's, then the pause image", got)
	}
	m := readBundleFile(t, b, "addons/coredns.yaml")
	for _, want := range []string{"image: herd.dev/addons/coredns:v1.12.0", "clusterIP: 10.215.0.10"} {
		if !strings.Contains(m, want) {
			t.Errorf("addons/coredns.yaml lacks %q", want)
		}
	}
}
