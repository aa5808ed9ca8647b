package addons

import (
	"fmt"
	"strings"
	"testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agent/distro/upstream"
	"sigs.k8s.io/yaml"
)

func TestEnabled(t *testing.T) {
	on, off := true, false
	if got := Enabled(v1alpha1.Addons{DNS: &on}); len(got) != 1 || got[0].Name != "dns" {
		t.Errorf("dns on: %+v", got)
	}
	if got := Enabled(v1alpha1.Addons{DNS: &off, Storage: &off, Metrics: &off}); len(got) != 0 {
		t.Errorf("all off: %+v", got)
	}
	var names []string
	for _, a := range Enabled(v1alpha1.Addons{DNS: &on, Storage: &on, Metrics: &on}) {
		names = append(names, a.Name)
	}
	if strings.Join(names, ",") != "dns,storage,metrics" {
		t.Errorf("all on: %v, want dns,storage,metrics in that order", names)
	}
}

// TestSourcePinsTheVersion keeps Version, the image's tag and the go.mod that builds it in step.
func TestSourcePinsTheVersion(t *testing.T) {
	for _, a := range Catalog {
		if !a.HasImage() {
			continue
		}
		files, err := a.SourceFiles()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(files["go.mod"]), " "+a.Version+"\n") || !strings.HasSuffix(a.Image, ":"+a.Version) {
			t.Errorf("%s: go.mod does not pin %s, or the image %s is not tagged with it", a.Name, a.Version, a.Image)
		}
		if len(files["go.sum"]) == 0 {
			t.Errorf("%s: go.sum missing from the embedded source", a.Name)
		}
		if hasMain := strings.Contains(string(files["main.go"]), "package main"); hasMain != (a.Package == "") {
			t.Errorf("%s: Package %q, embedded main.go %v: an add-on is built from exactly one of them", a.Name, a.Package, hasMain)
		}
		if a.Package != "" && !strings.HasPrefix(a.Package, modulePath(files["go.mod"])) {
			t.Errorf("%s: Package %s is not in the module go.mod requires", a.Name, a.Package)
		}
	}
}

// modulePath returns the path of the one module a go.mod requires directly.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if p, ok := strings.CutPrefix(line, "require "); ok && !strings.HasSuffix(p, "(") {
			return strings.Fields(p)[0]
		}
	}
	return "\x00none"
}

// manifestKinds renders an add-on's manifest and returns the kinds of its documents.
func manifestKinds(t *testing.T, a Addon) (string, map[string]bool) {
	t.Helper()
	m, err := a.Manifest()
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
	return string(m), kinds
}

// Cluster DNS has no pod, image nor program of its own (kube-combined serves it): its manifest is
// the kube-dns Service, without selector (its endpoint is written by kube-combined), at
// ClusterDNS, and the RBAC of the user kube-combined's CoreDNS reads the API as.
func TestManifestRenders(t *testing.T) {
	if CoreDNS.HasImage() {
		t.Errorf("cluster DNS has an image (%s): kube-combined serves it", CoreDNS.Image)
	}
	m, kinds := manifestKinds(t, CoreDNS)
	for _, k := range []string{"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service"} {
		if !kinds[k] {
			t.Errorf("no %s in the CoreDNS manifest", k)
		}
	}
	for _, k := range []string{"Deployment", "ConfigMap", "ServiceAccount"} {
		if kinds[k] {
			t.Errorf("a %s in the CoreDNS manifest, which kube-combined serves", k)
		}
	}
	for _, want := range []string{"clusterIP: " + ClusterDNS.String(), "kind: User\n  name: " + DNSUser + "\n", "resourceNames: [kube-dns]"} {
		if !strings.Contains(m, want) {
			t.Errorf("manifest lacks %q", want)
		}
	}
	if strings.Contains(m, "selector:") {
		t.Errorf("the kube-dns Service has a selector: its endpoint is kube-combined's")
	}
}

// The storage add-on is a default StorageClass whose provisioner is the agent: no program, image
// or pod of its own.
func TestStorageManifest(t *testing.T) {
	if LocalPath.HasImage() {
		t.Errorf("storage has an image (%s): the agent provisions its volumes", LocalPath.Image)
	}
	m, kinds := manifestKinds(t, LocalPath)
	if len(kinds) != 1 || !kinds["StorageClass"] {
		t.Errorf("storage manifest's kinds %v, want only a StorageClass", kinds)
	}
	for _, want := range []string{
		"name: local-path\n",
		`storageclass.kubernetes.io/is-default-class: "true"`,
		"provisioner: " + StorageProvisioner + "\n",
		"volumeBindingMode: WaitForFirstConsumer",
		"reclaimPolicy: Delete",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("storage manifest lacks %q", want)
		}
	}
}

// The metrics add-on's server runs in the node's kube-combined process: its manifests register
// the API at a Service without selector, whose Endpoints kube-combined keeps at the port the
// distribution serves it on, and grant the user it runs as what it reads and writes.
func TestMetricsManifest(t *testing.T) {
	if MetricsServer.HasImage() {
		t.Errorf("metrics has an image (%s): the node runs metrics-server", MetricsServer.Image)
	}
	m, kinds := manifestKinds(t, MetricsServer)
	for _, k := range []string{"APIService", "Service", "ClusterRoleBinding", "RoleBinding", "Role"} {
		if !kinds[k] {
			t.Errorf("no %s in the metrics manifest", k)
		}
	}
	for _, k := range []string{"Deployment", "ServiceAccount", "Endpoints"} {
		if kinds[k] {
			t.Errorf("a %s in the metrics manifest: the node runs metrics-server and keeps its Endpoints", k)
		}
	}
	for _, want := range []string{
		"name: v1beta1.metrics.k8s.io",
		"  service:\n    name: metrics-server\n    namespace: kube-system\n",
		fmt.Sprintf("  ports:\n  - {name: https, port: 443, protocol: TCP, targetPort: %d}\n", upstream.MetricsServerPort),
		"  kind: User\n  name: system:metrics-server\n",
		"  resourceNames: [metrics-server]\n  verbs: [get, update]\n",
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics manifest lacks %q", want)
		}
	}
	if strings.Contains(m, "selector:") || strings.Contains(m, "kind: ServiceAccount") {
		t.Error("the metrics Service has a selector, or RBAC names a service account: metrics-server is no pod")
	}
}

// TestAddonsShareOneShim: every add-on's pods carry the one shim group the instance's containerd
// passes through to the runc shim, so that they run under one shim process, not one each.
func TestAddonsShareOneShim(t *testing.T) {
	for _, a := range Catalog {
		m, err := a.Manifest()
		if err != nil {
			t.Fatal(err)
		}
		deployments := 0
		for _, doc := range strings.Split(string(m), "\n---\n") {
			var d struct {
				Kind string `json:"kind"`
				Spec struct {
					Template struct {
						Metadata struct {
							Annotations map[string]string `json:"annotations"`
						} `json:"metadata"`
					} `json:"template"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(doc), &d); err != nil {
				t.Fatal(err)
			}
			if d.Kind != "Deployment" {
				continue
			}
			deployments++
			if got := d.Spec.Template.Metadata.Annotations[upstream.ShimGroupAnnotation]; got != "herd-addons" {
				t.Errorf("%s: pod template's %s is %q, want herd-addons", a.Name, upstream.ShimGroupAnnotation, got)
			}
		}
		if deployments == 0 && a.HasImage() {
			t.Errorf("%s: no Deployment in its manifest", a.Name)
		}
	}
}
