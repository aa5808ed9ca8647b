package image

import (
	"strings"
	"testing"

	"herd.dev/herd/internal/addons"
)

// TestIntegrationAddons builds an image with every add-on on (the default): all three are
// manifests only (kube-combined serves DNS and resource metrics, the agent provisions volumes), so
// the bundle has no add-on image and nothing is built from source.
func TestIntegrationAddons(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a whole image with its add-ons: skipped under -short")
	}
	file := fixture(t, map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "  addons: {dns: false, storage: false, metrics: false}", "", 1)})
	b, lines := build(t, file, newStore(t))
	for _, a := range addons.Catalog {
		if a.HasImage() {
			t.Errorf("add-on %s has an image of its own (%s): the node serves every add-on", a.Name, a.Image)
		}
	}
	if out := strings.Join(lines, "\n"); strings.Contains(out, "from source") {
		t.Errorf("an add-on was built from source:\n%s", out)
	}
	if b.Config.ClusterDNS != addons.ClusterDNS.String() {
		t.Errorf("clusterDNS = %q, want %s", b.Config.ClusterDNS, addons.ClusterDNS)
	}
	if !b.Config.ResourceMetrics {
		t.Error("resourceMetrics = false with the metrics add-on on: the node would not run metrics-server")
	}
	var files []string
	for _, m := range b.Config.Manifests {
		files = append(files, m.File)
	}
	if got := strings.Join(files, " "); !strings.HasPrefix(got, "addons/coredns.yaml addons/storage.yaml addons/metrics-server.yaml manifests/") {
		t.Fatalf("manifests %s: want the add-ons' first, before the workload's", got)
	}
	var refs []string
	for _, im := range b.Config.Images {
		refs = append(refs, im.Ref)
	}
	want := "hello:v1 " + PauseImage
	if got := strings.Join(refs, " "); got != want {
		t.Errorf("images %s, want %s: the app's, the add-ons', then the pause image", got, want)
	}
	m := readBundleFile(t, b, "addons/coredns.yaml")
	if !strings.Contains(m, "clusterIP: 10.215.0.10") || strings.Contains(m, "image:") {
		t.Errorf("addons/coredns.yaml: want the kube-dns Service at 10.215.0.10 and no pod:\n%s", m)
	}
}
