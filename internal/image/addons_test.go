package image

import (
	"strings"
	"testing"

	"herd.dev/herd/internal/addons"
)

// TestIntegrationAddons builds an image with every add-on on (the default): CoreDNS is built from
// its pinned source with the go tool, which downloads its modules the first time; storage and
// metrics are manifests only (the agent provisions volumes, the node runs metrics-server).
func TestIntegrationAddons(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the add-ons from source: skipped under -short")
	}
	file := fixture(t, map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "  addons: {dns: false, storage: false, metrics: false}", "", 1)})
	b, lines := build(t, file, newStore(t))
	for _, a := range addons.Catalog {
		if !a.HasImage() {
			continue
		}
		if want := "add-on " + a.Name + ": building " + a.Binary + " " + a.Version + " from source"; !strings.Contains(strings.Join(lines, "\n"), want) {
			t.Errorf("no progress line %q:\n%s", want, strings.Join(lines, "\n"))
		}
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
	want := "hello:v1 herd.dev/addons/coredns:v1.12.0 " + PauseImage
	if got := strings.Join(refs, " "); got != want {
		t.Errorf("images %s, want %s: the app's, the add-ons', then the pause image", got, want)
	}
	m := readBundleFile(t, b, "addons/coredns.yaml")
	for _, want := range []string{"image: herd.dev/addons/coredns:v1.12.0", "clusterIP: 10.215.0.10"} {
		if !strings.Contains(m, want) {
			t.Errorf("addons/coredns.yaml lacks %q", want)
		}
	}
}
