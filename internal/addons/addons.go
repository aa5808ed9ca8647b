// Package addons is the catalog of cluster add-ons a node image bakes in, as a one-node
// distribution ships them: for each, the pinned source `herd image build` compiles (nothing can
// be pulled onto an instance, and building from pinned source keeps an image reproducible), the
// image reference pods use, and the manifests applied at boot before the workload's.
//
// The catalog holds cluster DNS (CoreDNS), storage (local-path-provisioner and a default
// StorageClass) and resource metrics (metrics-server). Which add-ons an image gets is the
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
)

// ClusterDNS is the address of the kube-dns Service, which the kubelet writes into every pod's
// resolv.conf. It is the tenth address of the upstream distribution's Service range
// (10.215.0.0/24), as kubeadm picks the tenth of its own; the distribution checks that it is in
// its range.
var ClusterDNS = netip.MustParseAddr("10.215.0.10")

// ShellImage is the reference of the shell image (Debian's busybox-static) that add-ons' helper
// pods run, such as the storage add-on's, which makes and removes volume directories with it.
const ShellImage = "herd.dev/addons/busybox:static"

// StorageDir is where the storage add-on makes volume directories, as the instance's pods see the
// node's file system. It is inside the kubelet's root, which the agent bind-mounts from the
// instance's own state directory: volumes are on the instance's disk, never shared with another
// instance nor left on the host, and go when the instance is deleted.
const StorageDir = "/var/lib/kubelet/local-path"

// Addon is one add-on of the catalog.
type Addon struct {
	// Name is the add-on's key in spec.addons (e.g. "dns").
	Name string
	// Binary is the program's name, its image's entrypoint (e.g. "coredns").
	Binary string
	// Version is the upstream version the pinned source builds.
	Version string
	// Image is the reference its pods use. The "herd.dev/addons/" prefix says that herd built
	// it, not the upstream project's registry.
	Image string
	// Package is the import path of the main package built, when the pinned module has its own
	// (a main package cannot be imported, so it is built by path from the embedded go.mod).
	// Default: the embedded main.go.
	Package string
	// NeedsShell says that the add-on's pods also run ShellImage.
	NeedsShell bool
	// source is the directory of the embedded source: go.mod.txt, go.sum.txt, main.go.txt unless
	// Package is set, and the manifest template BINARY.yaml.
	source string
	// switchOf returns the add-on's field of spec.addons.
	switchOf func(v1alpha1.Addons) *bool
}

//go:embed coredns local-path-provisioner metrics-server
var sources embed.FS

// CoreDNS is cluster DNS.
var CoreDNS = Addon{
	Name: "dns", Binary: "coredns", Version: "v1.12.0",
	Image: "herd.dev/addons/coredns:v1.12.0", source: "coredns",
	switchOf: func(a v1alpha1.Addons) *bool { return a.DNS },
}

// LocalPath is storage: a default StorageClass whose volumes are directories of the instance.
var LocalPath = Addon{
	Name: "storage", Binary: "local-path-provisioner", Version: "v0.0.30",
	Image: "herd.dev/addons/local-path-provisioner:v0.0.30", source: "local-path-provisioner",
	Package: "github.com/rancher/local-path-provisioner", NeedsShell: true,
	switchOf: func(a v1alpha1.Addons) *bool { return a.Storage },
}

// MetricsServer is resource metrics: the metrics.k8s.io API behind `kubectl top` and the
// HorizontalPodAutoscaler.
var MetricsServer = Addon{
	Name: "metrics", Binary: "metrics-server", Version: "v0.8.0",
	Image: "herd.dev/addons/metrics-server:v0.8.0", source: "metrics-server",
	Package:  "sigs.k8s.io/metrics-server/cmd/metrics-server",
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
	text, err := fs.ReadFile(sources, a.source+"/"+a.Binary+".yaml")
	if err != nil {
		return nil, fmt.Errorf("add-on %s: %w", a.Name, err)
	}
	t, err := template.New(a.Binary).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("add-on %s: %w", a.Name, err)
	}
	var out bytes.Buffer
	data := map[string]string{"Image": a.Image, "ClusterDNS": ClusterDNS.String(), "ShellImage": ShellImage, "StorageDir": StorageDir}
	if err := t.Execute(&out, data); err != nil {
		return nil, fmt.Errorf("add-on %s: %w", a.Name, err)
	}
	return out.Bytes(), nil
}
