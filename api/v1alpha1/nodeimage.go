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
	// file. Default: none; at least one of manifests, kustomize and charts is required.
	Manifests string `json:"manifests,omitempty"`
	// Kustomize is a directory holding a kustomization.yaml (a base or an overlay), relative to the
	// NodeImage file, rendered at build time as `kubectl kustomize DIR` does and applied at boot
	// after spec.manifests. Default: none.
	Kustomize string `json:"kustomize,omitempty"`
	// Charts are Helm charts rendered at build time as `helm template` does and applied at boot
	// after spec.manifests and spec.kustomize, in this order. Default: none.
	Charts []Chart `json:"charts,omitempty"`
	// Images are the container images baked into the bundle. Default: none.
	Images []AppImage `json:"images,omitempty"`
	// Addons are the cluster add-ons baked in and started at boot before the workload, as a
	// one-node distribution ships them. Default: every add-on on.
	Addons Addons `json:"addons,omitempty"`
}

// Addons switches the cluster add-ons. Each is built from source at a version herd pins.
type Addons struct {
	// DNS is cluster DNS: CoreDNS v1.12.2, run by the node's kube-combined process, serving the
	// kube-dns Service, so that pods resolve Services by name ("redis",
	// "api.shop.svc.cluster.local"). Default: true.
	DNS *bool `json:"dns,omitempty"`
	// Storage is a default StorageClass ("local-path", provisioned by the agent): a
	// PersistentVolumeClaim binds to a directory of the instance, as disposable as the instance
	// itself. Default: true.
	Storage *bool `json:"storage,omitempty"`
	// Metrics is resource metrics (metrics-server v0.8.0), so that `kubectl top` and a
	// HorizontalPodAutoscaler work inside the instance. Default: true.
	Metrics *bool `json:"metrics,omitempty"`
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

// Chart is one Helm chart rendered into the node image: a release that is installed once, at
// build time, and never upgraded in place (a new chart or new values make a new image).
type Chart struct {
	// Name is the release name, {{ .Release.Name }} in the chart's templates. Required.
	Name string `json:"name"`
	// Chart is a chart directory or a packaged chart (.tgz), relative to the NodeImage file.
	// Required.
	Chart string `json:"chart"`
	// Namespace is the release's namespace, {{ .Release.Namespace }}: namespaced objects the chart
	// renders without a namespace go there, and it is created at boot if it does not exist.
	// Default: default.
	Namespace string `json:"namespace,omitempty"`
	// ValuesFiles are values files, relative to the NodeImage file, merged in order over the
	// chart's values.yaml, as `helm template -f` does. Default: none.
	ValuesFiles []string `json:"valuesFiles,omitempty"`
	// Values are merged last, over the chart's values and ValuesFiles. Default: none.
	Values map[string]any `json:"values,omitempty"`
}
