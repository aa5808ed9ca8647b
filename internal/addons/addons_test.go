package addons

import (
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"sigs.k8s.io/yaml"
)

func TestEnabled(t *testing.T) {
	on, off := true, false
	if got := Enabled(v1alpha1.Addons{DNS: &on}); len(got) != 1 || got[0].Name != "dns" {
		t.Errorf("dns on: %+v", got)
	}
	if got := Enabled(v1alpha1.Addons{DNS: &off}); len(got) != 0 {
		t.Errorf("dns off: %+v", got)
	}
}

// TestSourcePinsTheVersion keeps Version, the image's tag and the go.mod that builds it in step.
func TestSourcePinsTheVersion(t *testing.T) {
	for _, a := range Catalog {
		files, err := a.SourceFiles()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(files["go.mod"]), " "+a.Version+"\n") || !strings.HasSuffix(a.Image, ":"+a.Version) {
			t.Errorf("%s: go.mod does not pin %s, or the image %s is not tagged with it", a.Name, a.Version, a.Image)
		}
		if !strings.Contains(string(files["main.go"]), "package main") || len(files["go.sum"]) == 0 {
			t.Errorf("%s: main.go or go.sum missing from the embedded source", a.Name)
		}
	}
}

func TestManifestRenders(t *testing.T) {
	m, err := CoreDNS.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, doc := range strings.Split(string(m), "\n---\n") {
		var o struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil || o.APIVersion == "" || o.Kind == "" {
			t.Fatalf("document without apiVersion and kind (%v):\n%s", err, doc)
		}
		kinds[o.Kind] = true
	}
	for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "Service"} {
		if !kinds[k] {
			t.Errorf("no %s in the CoreDNS manifest", k)
		}
	}
	for _, want := range []string{"image: " + CoreDNS.Image, "clusterIP: " + ClusterDNS.String(), "imagePullPolicy: Never"} {
		if !strings.Contains(string(m), want) {
			t.Errorf("manifest lacks %q", want)
		}
	}
}
