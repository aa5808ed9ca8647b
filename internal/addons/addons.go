// Package addons is the catalog of cluster add-ons a node image bakes in, as a one-node
// distribution ships them: for each, the pinned source `herd image build` compiles (nothing can
// be pulled onto an instance, and building from pinned source keeps an image reproducible), the
// image reference pods use, and the manifests applied at boot before the workload's.
//
// The catalog holds cluster DNS (CoreDNS) and resource metrics (metrics-server), which the node
// runs in its kube-combined process, and storage (a default StorageClass whose provisioner is the
// agent): none has a program or image of its own today. Which add-ons an image gets is the
// NodeImage's spec.addons, every one on by default.
package addons

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"net/netip"
	"text/template"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agent/localpv"
)

// ClusterDNS is the address of the kube-dns Service, which the kubelet writes into every pod's
// resolv.conf. It is the tenth address of the upstream distribution's Service range
// (10.215.0.0/24), as kubeadm picks the tenth of its own; the distribution checks that it is in
// its range.
var ClusterDNS = netip.MustParseAddr("10.215.0.10")

// DNSUser is the user kube-combined's CoreDNS reads the API as, which the DNS add-on's manifest
// grants what it reads and writes; the upstream distribution makes its credentials.
const DNSUser = "system:coredns"

// StorageDir is where the storage add-on's provisioner, the agent, makes volume directories, as
// the instance's pods see the node's file system (see localpv.Root).
const StorageDir = localpv.Root

// StorageProvisioner is the provisioner the storage add-on's StorageClass names: the agent.
const StorageProvisioner = localpv.Name

// Addon is one add-on of the catalog.
type Addon struct {
	// Name is the add-on's key in spec.addons (e.g. "dns").
	Name string
	// Binary is the program's name, its image's entrypoint (e.g. "coredns"). Empty for an add-on
	// the agent or the node's own processes serve, which has no program nor image of its own:
	// only manifests.
	Binary string
	// Version is the upstream version the pinned source builds (for an add-on the node serves,
	// the version it runs).
	Version string
	// Image is the reference its pods use. The "herd.dev/addons/" prefix says that herd built
	// it, not the upstream project's registry.
	Image string
	// Package is the import path of the main package built, when the pinned module has its own
	// (a main package cannot be imported, so it is built by path from the embedded go.mod).
	// Default: the embedded main.go.
	Package string
	// source is the directory of the embedded source: go.mod.txt, go.sum.txt, main.go.txt unless
	// Package is set (none when Binary is empty), and the manifest template SOURCE.yaml.
	source string
	// switchOf returns the add-on's field of spec.addons.
	switchOf func(v1alpha1.Addons) *bool
}

//go:embed coredns storage metrics-server
var sources embed.FS

// CoreDNS is cluster DNS: CoreDNS's server and plugins, at the version hack/kubernetes/go.mod
// pins, run in kube-combined (the node's process of the Kubernetes components), which saves the
// instance a process, a pod and an image; its manifests are the kube-dns Service and what CoreDNS
// may read and write.
var CoreDNS = Addon{
	Name: "dns", Version: "v1.12.2", source: "coredns",
	switchOf: func(a v1alpha1.Addons) *bool { return a.DNS },
}

// LocalPath is storage: a default StorageClass whose volumes are directories of the instance,
// made by the agent, which saves the instance a provisioner's process and pod.
var LocalPath = Addon{
	Name: "storage", source: "storage",
	switchOf: func(a v1alpha1.Addons) *bool { return a.Storage },
}

// MetricsServer is resource metrics: the metrics.k8s.io API behind `kubectl top` and the
// HorizontalPodAutoscaler. Its server, metrics-server, runs in the node's kube-combined process
// (pinned in hack/kubernetes/go.mod), which saves the instance a process, a pod and an image: the
// manifests are its RBAC, a Service without selector whose Endpoints kube-combined keeps, and
// the APIService.
var MetricsServer = Addon{
	Name: "metrics", Version: "v0.8.0", source: "metrics-server",
	switchOf: func(a v1alpha1.Addons) *bool { return a.Metrics },
}

// Catalog is every add-on, in the order they are applied at boot.
var Catalog = []Addon{CoreDNS, LocalPath, MetricsServer}

// Enabled returns the add-ons spec turns on (defaults applied), in catalog order.
func Enabled(spec v1alpha1.Addons) []Addon {
	var out []Addon
	for _, a := range Catalog {
		if on := a.switchOf(spec); on != nil && *on {
			out = append(out, a)
		}
	}
	return out
}

// BuildTarget is what `go build` is given in the add-on's module: Package, or "." for the
// embedded main.go.
func (a Addon) BuildTarget() string {
	if a.Package != "" {
		return a.Package
	}
	return "."
}

// Field is the add-on's field in a NodeImage, for errors.
func (a Addon) Field() string { return "spec.addons." + a.Name }

// HasImage says whether the add-on runs a program of its own, built into its own image.
func (a Addon) HasImage() bool { return a.Binary != "" }

// ManifestFile is the bundle's file of the add-on's manifests.
func (a Addon) ManifestFile() string { return "addons/" + a.source + ".yaml" }

// SourceFiles returns the files of the Go module that builds the add-on's binary, by name
// (go.mod, go.sum, and main.go unless Package is set).
func (a Addon) SourceFiles() (map[string][]byte, error) {
	out := map[string][]byte{}
	names := []string{"go.mod", "go.sum"}
	if a.Package == "" {
		names = append(names, "main.go")
	}
	for _, name := range names {
		data, err := fs.ReadFile(sources, a.source+"/"+name+".txt")
		if err != nil {
			return nil, fmt.Errorf("add-on %s: %w", a.Name, err)
		}
		out[name] = data
	}
	return out, nil
}

// Manifest returns the add-on's manifests, applied at boot before the workload's.
func (a Addon) Manifest() ([]byte, error) {
	text, err := fs.ReadFile(sources, a.source+"/"+a.source+".yaml")
	if err != nil {
		return nil, fmt.Errorf("add-on %s: %w", a.Name, err)
	}
	t, err := template.New(a.source).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("add-on %s: %w", a.Name, err)
	}
	var out bytes.Buffer
	data := map[string]string{"Image": a.Image, "ClusterDNS": ClusterDNS.String(), "StorageDir": StorageDir, "Provisioner": StorageProvisioner, "User": DNSUser}
	if err := t.Execute(&out, data); err != nil {
		return nil, fmt.Errorf("add-on %s: %w", a.Name, err)
	}
	return out.Bytes(), nil
}
