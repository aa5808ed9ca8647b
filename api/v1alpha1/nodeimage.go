package v1alpha1

// NodeImage describes the immutable image every instance of a fleet boots from: a Kubernetes
// distribution and version, the manifests applied at boot and the application images baked in.
// `herd image build` turns it into a bundle named by the digest of its content.
type NodeImage struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta    `json:"metadata"`
	Spec     NodeImageSpec `json:"spec"`
}

// NodeImageSpec is the content of a node image.
type NodeImageSpec struct {
	// Kubernetes is the cluster distribution inside every instance.
	Kubernetes KubernetesSpec `json:"kubernetes,omitempty"`
	// Manifests is a directory of Kubernetes YAML files applied at boot, relative to the NodeImage
	// file. Required.
	Manifests string `json:"manifests"`
	// Images are the container images baked into the bundle. Default: none.
	Images []AppImage `json:"images,omitempty"`
}

// KubernetesSpec pins the Kubernetes inside an instance.
type KubernetesSpec struct {
	// Distribution is "upstream" (the pinned upstream components, for local instances) or "k3s" (for
	// cloud images). Default: upstream.
	Distribution string `json:"distribution,omitempty"`
	// Version is the Kubernetes version. Default: the version herd pins (v1.33.x).
	Version string `json:"version,omitempty"`
}

// AppImage is one container image baked into the node image. Exactly one of Main and Tar is set.
type AppImage struct {
	// Name is the image reference pods use, e.g. "hello:v1". Required.
	Name string `json:"name"`
	// Main is a Go main package, relative to the NodeImage file, built into a static binary and
	// packaged as a single-layer image. Default: none.
	Main string `json:"main,omitempty"`
	// Tar is an image tar (docker-archive or OCI layout), relative to the NodeImage file. Default: none.
	Tar string `json:"tar,omitempty"`
	// Env is set in the image's config when built from Main. Default: none.
	Env map[string]string `json:"env,omitempty"`
}
