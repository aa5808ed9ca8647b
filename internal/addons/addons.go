// Package addons is the catalog of cluster add-ons a node image bakes in, as a one-node
// distribution ships them: for each, the pinned source `herd image build` compiles (nothing can
// be pulled onto an instance, and building from pinned source keeps an image reproducible), the
// image reference pods use, and the manifests applied at boot before the workload's.
//
// The catalog holds cluster DNS (CoreDNS). Which add-ons an image gets is the NodeImage's
// spec.addons, every one on by default.
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
	// source is the directory of the embedded source: main.go.txt, go.mod.txt, go.sum.txt and
	// the manifest template BINARY.yaml.
	source string
	// switchOf returns the add-on's field of spec.addons.
	switchOf func(v1alpha1.Addons) *bool
}

//go:embed coredns
var sources embed.FS

// CoreDNS is cluster DNS.
var CoreDNS = Addon{
	Name: "dns", Binary: "coredns", Version: "v1.12.0",
	Image: "herd.dev/addons/coredns:v1.12.0", source: "coredns",
	switchOf: func(a v1alpha1.Addons) *bool { return a.DNS },
}

// Catalog is every add-on, in the order they are applied at boot.
var Catalog = []Addon{CoreDNS}

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

// Field is the add-on's field in a NodeImage, for errors.
func (a Addon) Field() string { return "spec.addons." + a.Name }

// SourceFiles returns the files of the Go module that builds the add-on's binary, by name
// (main.go, go.mod, go.sum).
func (a Addon) SourceFiles() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, name := range []string{"main.go", "go.mod", "go.sum"} {
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
	if err := t.Execute(&out, map[string]string{"Image": a.Image, "ClusterDNS": ClusterDNS.String()}); err != nil {
		return nil, fmt.Errorf("add-on %s: %w", a.Name, err)
	}
	return out.Bytes(), nil
}
