// Package image turns a NodeImage into a node image bundle: the directory every instance of a
// fleet boots from, named by the digest of its content.
//
// A bundle holds the NodeImage's Kubernetes manifests (copied as they are, and those its
// kustomization and Helm charts render, rendered at build time), one docker-archive
// image tar per app image (built from a Go main package, or read from a given image tar), the
// pause (sandbox) image, for the upstream distribution the warm store (an etcd data directory with
// the cluster's bootstrap objects, made once per machine: upstream.WarmStore), and bundle.json, the
// node configuration that lists all of them with their SHA-256 digests. The bundle's digest is the SHA-256 of bundle.json, so it covers every byte of
// the bundle; the same inputs give the same digest, and any change (a manifest, the app's source,
// an image's env) gives a new one, which is what a fleet revision pins.
//
// Bundles live in a Store (see StoreDir): Build writes into a temporary directory of the store and
// renames the finished bundle into place, so a failed or interrupted build leaves no bundle behind.
//
// build.go holds Build; plan.go checks its inputs first, render.go renders Kustomize and Helm
// inputs, gobuild.go builds binaries with the go
// tool, oci.go writes and reads image tars, bundle.go describes a bundle and store.go keeps them.
package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/addons"
	"herd.dev/herd/internal/agent/distro/upstream"
	"herd.dev/herd/internal/image/bundle"
	"herd.dev/herd/internal/kubebin"
)

// Build turns the NodeImage in nodeImageFile into a bundle in store and returns it. Relative
// paths in the NodeImage (spec.manifests, spec.kustomize, spec.charts[].chart and .valuesFiles,
// spec.images[].main and .tar) are relative to the file's directory. progress, if not nil, receives one line per long step and one per warning.
// The NodeImage's name then refers to the new bundle. If the bundle already exists (nothing
// changed), it is returned as it is. On error nothing is left in the store.
func Build(ctx context.Context, nodeImageFile string, store *Store, progress func(string)) (Bundle, error) {
	say := func(format string, args ...any) {
		if progress != nil {
			progress(fmt.Sprintf(format, args...))
		}
	}
	ni, err := loadNodeImage(nodeImageFile)
	if err != nil {
		return Bundle{}, err
	}
	abs, err := filepath.Abs(nodeImageFile)
	if err != nil {
		return Bundle{}, err
	}
	p, err := plan(ctx, ni, filepath.Dir(abs))
	if err != nil {
		return Bundle{}, fmt.Errorf("%s: nothing was built:\n%w", nodeImageFile, err)
	}
	for _, w := range p.warnings {
		say("warning: %s", w)
	}

	if err := store.init(); err != nil {
		return Bundle{}, err
	}
	store.cleanStale(time.Now())
	work, err := os.MkdirTemp(store.tmpDir(), "build-")
	if err != nil {
		return Bundle{}, fmt.Errorf("image store: %w", err)
	}
	// On success the bundle has been renamed out of work; what is left is scratch space.
	defer os.RemoveAll(work)
	bdir := filepath.Join(work, "bundle")
	scratch := filepath.Join(work, "scratch")
	for _, d := range []string{filepath.Join(bdir, "manifests"), filepath.Join(bdir, "images"), scratch} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return Bundle{}, fmt.Errorf("image store: %w", err)
		}
	}

	cfg := Config{
		SchemaVersion: SchemaVersion,
		Name:          ni.Metadata.Name,
		Kubernetes:    ni.Spec.Kubernetes,
		PauseImage:    PauseImage,
	}
	enabled := addons.Enabled(ni.Spec.Addons)
	for _, a := range enabled {
		rec, err := writeAddonManifest(a, bdir)
		if err != nil {
			return Bundle{}, err
		}
		cfg.Manifests = append(cfg.Manifests, rec)
		switch a.Name {
		case addons.CoreDNS.Name:
			cfg.ClusterDNS = addons.ClusterDNS.String()
		case addons.MetricsServer.Name:
			cfg.ResourceMetrics = true
		}
	}
	if ni.Spec.Manifests != "" {
		say("manifests: %d file(s) from %s", len(p.manifests), ni.Spec.Manifests)
	}
	for _, m := range p.manifests {
		file := "manifests/" + filepath.Base(m)
		rec, err := copyFile(m, filepath.Join(bdir, filepath.FromSlash(file)))
		if err != nil {
			return Bundle{}, fmt.Errorf("spec.manifests: %w", err)
		}
		rec.File = file
		cfg.Manifests = append(cfg.Manifests, rec)
	}
	for _, r := range p.rendered {
		say("manifests: %s rendered from %s", r.file, r.field)
		dst := filepath.Join(bdir, filepath.FromSlash(r.file))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return Bundle{}, fmt.Errorf("image store: %w", err)
		}
		rec, err := writeFile(dst, r.data)
		if err != nil {
			return Bundle{}, fmt.Errorf("%s: %w", r.field, err)
		}
		rec.File, rec.Namespace = r.file, r.namespace
		cfg.Manifests = append(cfg.Manifests, rec)
	}

	for i, im := range ni.Spec.Images {
		if err := ctx.Err(); err != nil {
			return Bundle{}, err
		}
		field := fmt.Sprintf("spec.images[%d]", i)
		file := fmt.Sprintf("images/%d-%s.tar", i, fileSafe(im.Name))
		dst := filepath.Join(bdir, filepath.FromSlash(file))
		var rec ImageRecord
		if im.Main != "" {
			say("image %s: go build %s", im.Name, im.Main)
			entry := entryName(im.Name)
			bin := filepath.Join(scratch, fmt.Sprintf("bin-%d", i), entry)
			if err := goBuild(ctx, p.goTool, p.mainDirs[i], bin, nil); err != nil {
				return Bundle{}, fmt.Errorf("%s.main: go build %s failed:\n%w", field, im.Main, err)
			}
			img, err := binaryImage(bin, entry, im.Env, filepath.Join(scratch, fmt.Sprintf("layer-%d.tar", i)), "herd image build: go build "+im.Main)
			if err != nil {
				return Bundle{}, fmt.Errorf("%s: packaging %s: %w", field, im.Name, err)
			}
			if rec, err = writeImageTar(im.Name, img, dst, file); err != nil {
				return Bundle{}, fmt.Errorf("%s: writing %s: %w", field, im.Name, err)
			}
		} else {
			say("image %s: reading %s", im.Name, im.Tar)
			img, err := readImageTar(p.tarPaths[i], im.Name, filepath.Join(scratch, fmt.Sprintf("oci-%d", i)))
			if err != nil {
				return Bundle{}, fmt.Errorf("%s.tar: %s: %w", field, im.Tar, err)
			}
			if rec, err = writeImageTar(im.Name, img, dst, file); err != nil {
				return Bundle{}, fmt.Errorf("%s.tar: %s: %w", field, im.Tar, err)
			}
		}
		say("image %s: %s, %s", im.Name, rec.ID[:19], FormatSize(rec.Size))
		cfg.Images = append(cfg.Images, rec)
	}

	for _, a := range enabled {
		if !a.HasImage() {
			continue
		}
		say("add-on %s: building %s %s from source (the first build downloads its modules: a minute or two)", a.Name, a.Binary, a.Version)
		rec, err := buildAddonImage(ctx, p.goTool, a, scratch, bdir)
		if err != nil {
			return Bundle{}, err
		}
		say("image %s: %s, %s", a.Image, rec.ID[:19], FormatSize(rec.Size))
		cfg.Images = append(cfg.Images, rec)
	}

	say("image %s: building the pause (sandbox) image", PauseImage)
	rec, err := buildPause(ctx, p.goTool, scratch, bdir)
	if err != nil {
		return Bundle{}, err
	}
	cfg.Images = append(cfg.Images, rec)

	if cfg.Kubernetes.Distribution == upstream.Name {
		if cfg.Store, err = writeWarmStore(ctx, bdir); err != nil {
			// Instances boot without it, a second or so slower.
			say("warning: no warm store in the bundle: %v", err)
		}
	}
	if err := ctx.Err(); err != nil {
		return Bundle{}, err
	}
	return store.commit(bdir, cfg, say)
}

// writeWarmStore copies this machine's warm store of the upstream distribution
// (upstream.WarmStore) into the bundle in bdir and returns its records.
func writeWarmStore(ctx context.Context, bdir string) ([]FileRecord, error) {
	src, err := upstream.WarmStore(ctx, nil)
	if err != nil {
		return nil, err
	}
	var recs []FileRecord
	err = filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		file := bundle.StoreDir + "/" + filepath.ToSlash(rel)
		dst := filepath.Join(bdir, filepath.FromSlash(file))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return err
		}
		rec, err := copyFile(path, dst)
		if err != nil {
			return err
		}
		rec.File = file
		recs = append(recs, rec)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("warm store: %w", err)
	}
	return recs, nil
}

// commit writes cfg as the bundle.json of the bundle built in bdir, moves the bundle into the
// store under its digest and points cfg.Name at it.
func (s *Store) commit(bdir string, cfg Config, say func(string, ...any)) (Bundle, error) {
	data, err := cfg.Marshal()
	if err != nil {
		return Bundle{}, err
	}
	if err := os.WriteFile(filepath.Join(bdir, ConfigFile), data, 0o644); err != nil {
		return Bundle{}, fmt.Errorf("image store: %w", err)
	}
	digest := bundle.DigestBytes(data)
	final := s.bundleDir(digest)
	if _, err := os.Stat(final); err == nil {
		say("unchanged: %s is already in the store", digest)
	} else if err := os.Rename(bdir, final); err != nil {
		// Another build of the same content may have won the race; that bundle is the same.
		if _, serr := os.Stat(final); serr != nil {
			return Bundle{}, fmt.Errorf("image store: %w", err)
		}
	}
	if err := s.setName(cfg.Name, digest); err != nil {
		return Bundle{}, err
	}
	return s.Get(digest)
}

// Put stores a bundle made of cfg and files (bundle-relative paths to their content, each of
// which cfg records), as Build does once everything is built: for tests and tools that make
// bundles without building them. cfg.SchemaVersion is filled in.
func (s *Store) Put(cfg Config, files map[string][]byte) (Bundle, error) {
	if err := s.init(); err != nil {
		return Bundle{}, err
	}
	work, err := os.MkdirTemp(s.tmpDir(), "put-")
	if err != nil {
		return Bundle{}, fmt.Errorf("image store: %w", err)
	}
	defer os.RemoveAll(work)
	for name, data := range files {
		dst := filepath.Join(work, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return Bundle{}, fmt.Errorf("image store: %w", err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return Bundle{}, fmt.Errorf("image store: %w", err)
		}
	}
	cfg.SchemaVersion = SchemaVersion
	return s.commit(work, cfg, func(string, ...any) {})
}

// loadNodeImage reads, defaults and validates the one NodeImage of a file.
func loadNodeImage(file string) (*v1alpha1.NodeImage, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	docs, err := v1alpha1.DecodeAndValidate(data, "local", kubebin.Version)
	if err != nil {
		return nil, fmt.Errorf("%s is invalid, nothing was built:\n%w", file, err)
	}
	var nis []*v1alpha1.NodeImage
	for _, d := range docs {
		switch o := d.Object.(type) {
		case *v1alpha1.NodeImage:
			nis = append(nis, o)
		case *v1alpha1.Fleet:
			return nil, fmt.Errorf("%s: document %d is a Fleet: apply it with `herd apply -f %s`; nothing was built", file, d.Index+1, file)
		}
	}
	if len(nis) != 1 {
		return nil, fmt.Errorf("%s holds %d NodeImages: herd image build builds one per file; nothing was built", file, len(nis))
	}
	return nis[0], nil
}

// copyFile copies src to dst and returns the digest and size (File left empty).
func copyFile(src, dst string) (FileRecord, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return FileRecord{}, err
	}
	return writeFile(dst, data)
}

// writeFile writes data to dst and returns its digest and size (File left empty).
func writeFile(dst string, data []byte) (FileRecord, error) {
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		return FileRecord{}, err
	}
	return FileRecord{Digest: bundle.DigestBytes(data), Size: int64(len(data))}, nil
}

// fileSafe maps an image reference to a file name: "hello:v1" -> "hello-v1".
func fileSafe(ref string) string {
	b := []byte(ref)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '-'
		}
	}
	return string(b)
}

// entryName is where an image built from a Go package keeps its binary: the last element of the
// image's repository ("registry.example/team/api:v2" -> "api").
func entryName(ref string) string {
	n := "app"
	if t, err := name.NewTag(ref); err == nil {
		repo := t.RepositoryStr()
		n = fileSafe(repo[strings.LastIndex(repo, "/")+1:])
	}
	if n == "" || n == "tmp" || n == "." || n == ".." {
		n = "app"
	}
	return n
}

// FormatSize writes a byte count as docker does: 999B, 1.5kB, 12.3MB.
func FormatSize(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	f := float64(n)
	for _, u := range []string{"kB", "MB", "GB", "TB"} {
		f /= unit
		if f < unit {
			return fmt.Sprintf("%.3g%s", f, u)
		}
	}
	return fmt.Sprintf("%.3gPB", f/unit)
}
