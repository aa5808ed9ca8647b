// Package bundle is the on-disk format of a built node image: bundle.json and the files it
// records. It is apart from package image, which builds bundles with Helm, Kustomize and the go
// tool, so that the agent inside every instance reads bundles without linking any of that: every
// package linked into the agent is memory each instance pays for.
package bundle

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// PauseImage is the reference of the sandbox ("pause") image every bundle carries. The agent must
// configure containerd's CRI plugin with it (sandbox_image), as no image can be pulled.
const PauseImage = "registry.k8s.io/pause:3.10"

// SchemaVersion is the version of the bundle.json format this package writes and reads.
const SchemaVersion = 1

// ConfigFile is the name of the node configuration at the root of every bundle. The bundle's
// digest is the SHA-256 of this file, which in turn records the SHA-256 of every other file.
const ConfigFile = "bundle.json"

// Config is the content of bundle.json: what an agent needs to boot an instance from the bundle.
// It holds no timestamps or host paths, so that the same inputs give the same bytes.
type Config struct {
	// SchemaVersion is the bundle format's version (SchemaVersion).
	SchemaVersion int `json:"schemaVersion"`
	// Name is the NodeImage's metadata.name.
	Name string `json:"name"`
	// Kubernetes is the distribution and version the instance runs, defaults applied.
	Kubernetes v1alpha1.KubernetesSpec `json:"kubernetes"`
	// PauseImage is the sandbox image reference containerd must be configured with
	// (sandbox_image); its tar is one of Images.
	PauseImage string `json:"pauseImage"`
	// ClusterDNS is the address of the cluster DNS Service the kubelet gives pods, when the
	// image has the DNS add-on. Default: none (pods get no cluster DNS).
	ClusterDNS string `json:"clusterDNS,omitempty"`
	// ResourceMetrics says that the image has the metrics add-on, whose server the node runs
	// (the agent's distribution): its manifests register the API and the Service it is reached
	// at. Default: false (no resource metrics).
	ResourceMetrics bool `json:"resourceMetrics,omitempty"`
	// Images are every image tar to import into the instance's containerd before the manifests are
	// applied: the app images in spec order, the add-ons' images, then the pause image.
	Images []ImageRecord `json:"images"`
	// Manifests are the Kubernetes manifests to apply at boot, in the order to apply them: the
	// add-ons', the NodeImage's manifests as they are, then what its kustomization and charts
	// rendered.
	Manifests []FileRecord `json:"manifests"`
	// Store is the warm store: the files of an etcd data directory, under StoreDir, in which
	// the API server of the bundle's Kubernetes has started once, so that it holds the
	// cluster's bootstrap objects (the default RBAC policy, the system priority classes and
	// namespaces, API Priority and Fairness' configuration) and nothing of any instance's
	// identity. An instance's etcd starts from a copy on its first boot. Default: none (the
	// instance's API server writes those objects at boot).
	Store []FileRecord `json:"store,omitempty"`
}

// StoreDir is the directory of a bundle that holds its warm store (Config.Store).
const StoreDir = "store"

// ImageRecord is one image tar of a bundle.
type ImageRecord struct {
	// Ref is the reference pods use, as written in the NodeImage (e.g. "hello:v1").
	Ref string `json:"ref"`
	// File is the tar's path inside the bundle, slash-separated (e.g. "images/0-hello-v1.tar").
	// The tar is a docker-archive (manifest.json plus blobs) holding one image tagged Ref.
	File string `json:"file"`
	// Digest is the SHA-256 of the tar file.
	Digest string `json:"digest"`
	// ID is the digest of the image's config, the image ID container runtimes show.
	ID string `json:"id"`
	// Size is the tar's size in bytes.
	Size int64 `json:"size"`
}

// FileRecord is one manifest file of a bundle.
type FileRecord struct {
	// File is the path inside the bundle, slash-separated (e.g. "manifests/deployment.yaml").
	File string `json:"file"`
	// Digest is the SHA-256 of the file.
	Digest string `json:"digest"`
	// Size is the file's size in bytes.
	Size int64 `json:"size"`
	// Namespace is where the file's namespaced objects that name no namespace are applied (a Helm
	// release's namespace). Default: default.
	Namespace string `json:"namespace,omitempty"`
}

// Bundle is a built node image in a Store.
type Bundle struct {
	// Digest names the bundle: "sha256:" and the hex SHA-256 of its bundle.json.
	Digest string `json:"digest"`
	// Dir is the bundle's directory.
	Dir string `json:"dir"`
	// Created is when the bundle entered the store.
	Created time.Time `json:"created"`
	// Size is the total size of the bundle's files in bytes.
	Size int64 `json:"size"`
	// Config is the parsed bundle.json.
	Config Config `json:"config"`
}

// Path returns the absolute path of a file of the bundle, given as recorded in its Config
// (e.g. an ImageRecord's File).
func (b Bundle) Path(file string) string {
	return filepath.Join(b.Dir, filepath.FromSlash(file))
}

// AppImages returns the bundle's images other than the pause image.
func (b Bundle) AppImages() []ImageRecord {
	var out []ImageRecord
	for _, im := range b.Config.Images {
		if im.Ref != b.Config.PauseImage {
			out = append(out, im)
		}
	}
	return out
}

// ShortDigest is the first 12 hex digits of the digest, as `herd image ls` shows it.
func (b Bundle) ShortDigest() string {
	h := strings.TrimPrefix(b.Digest, "sha256:")
	if len(h) > 12 {
		h = h[:12]
	}
	return h
}

// Verify checks every file of the bundle against the digests recorded in bundle.json, and
// bundle.json against the bundle's digest. It reads every byte of the bundle.
func (b Bundle) Verify() error { return b.verify(true) }

// VerifyManifests checks bundle.json, the manifests and the warm store as Verify does, and not the image tars:
// for a bundle whose images are in the container runtime's store already.
func (b Bundle) VerifyManifests() error { return b.verify(false) }

func (b Bundle) verify(images bool) error {
	data, err := os.ReadFile(filepath.Join(b.Dir, ConfigFile))
	if err != nil {
		return fmt.Errorf("bundle %s: %w", b.Digest, err)
	}
	if got := DigestBytes(data); got != b.Digest {
		return fmt.Errorf("bundle %s: %s has digest %s: the bundle is corrupt; rebuild it with herd image build", b.Digest, ConfigFile, got)
	}
	check := func(file, want string) error {
		got, _, err := DigestFile(b.Path(file))
		if err != nil {
			return fmt.Errorf("bundle %s: %w", b.Digest, err)
		}
		if got != want {
			return fmt.Errorf("bundle %s: %s has digest %s, bundle.json records %s: the bundle is corrupt; rebuild it with herd image build", b.Digest, file, got, want)
		}
		return nil
	}
	for _, m := range slices.Concat(b.Config.Manifests, b.Config.Store) {
		if err := check(m.File, m.Digest); err != nil {
			return err
		}
	}
	for _, im := range b.Config.Images {
		if !images {
			break
		}
		if err := check(im.File, im.Digest); err != nil {
			return err
		}
	}
	return nil
}

// Size is the total size of the files the config records.
func (c Config) Size() int64 {
	var n int64
	for _, m := range slices.Concat(c.Manifests, c.Store) {
		n += m.Size
	}
	for _, im := range c.Images {
		n += im.Size
	}
	return n
}

// Marshal encodes the config as bundle.json: indented JSON with a final newline, fields in
// struct order, so equal configs give equal bytes.
func (c Config) Marshal() ([]byte, error) {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// DigestBytes is "sha256:" and the hex SHA-256 of data.
func DigestBytes(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DigestFile returns "sha256:" and the hex SHA-256 of the file at path, and its size.
func DigestFile(path string) (string, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), n, nil
}
