// Package image turns a NodeImage into a node image bundle: the directory every instance of a
// fleet boots from, named by the digest of its content.
//
// A bundle holds the NodeImage's Kubernetes manifests (copied as they are), one docker-archive
// image tar per app image (built from a Go main package, or read from a given image tar), the
// pause (sandbox) image, and bundle.json, the node configuration that lists all of them with their
// SHA-256 digests. The bundle's digest is the SHA-256 of bundle.json, so it covers every byte of
// the bundle; the same inputs give the same digest, and any change (a manifest, the app's source,
// an image's env) gives a new one, which is what a fleet revision pins.
//
// Bundles live in a Store (see StoreDir): Build writes into a temporary directory of the store and
// renames the finished bundle into place, so a failed or interrupted build leaves no bundle behind.
package image

import (
	"bytes"
	"context"
	_ "embed" // the pause program's source
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/kubebin"
)

// PauseImage is the reference of the sandbox ("pause") image every bundle carries. The agent must
// configure containerd's CRI plugin with it (sandbox_image), as no image can be pulled.
const PauseImage = "registry.k8s.io/pause:3.10"

//go:embed pause/main.go.txt
var pauseSource []byte

// pauseGoMod is the go.mod of the temporary module the pause program is built in. Its go line is
// old on purpose: any installed toolchain builds it without fetching another.
const pauseGoMod = "module herd.dev/pause\n\ngo 1.20\n"

// Build turns the NodeImage in nodeImageFile into a bundle in store and returns it. Relative
// paths in the NodeImage (spec.manifests, spec.images[].main and .tar) are relative to the
// file's directory. progress, if not nil, receives one line per long step and one per warning.
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
	say("manifests: %d file(s) from %s", len(p.manifests), ni.Spec.Manifests)
	for _, m := range p.manifests {
		file := "manifests/" + filepath.Base(m)
		rec, err := copyFile(m, filepath.Join(bdir, filepath.FromSlash(file)))
		if err != nil {
			return Bundle{}, fmt.Errorf("spec.manifests: %w", err)
		}
		rec.File = file
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

	say("image %s: building the pause (sandbox) image", PauseImage)
	rec, err := buildPause(ctx, p.goTool, scratch, bdir)
	if err != nil {
		return Bundle{}, err
	}
	cfg.Images = append(cfg.Images, rec)

	data, err := cfg.marshal()
	if err != nil {
		return Bundle{}, err
	}
	if err := os.WriteFile(filepath.Join(bdir, ConfigFile), data, 0o644); err != nil {
		return Bundle{}, fmt.Errorf("image store: %w", err)
	}
	digest := digestBytes(data)
	if err := ctx.Err(); err != nil {
		return Bundle{}, err
	}
	final := store.bundleDir(digest)
	if _, err := os.Stat(final); err == nil {
		say("unchanged: %s is already in the store", digest)
	} else if err := os.Rename(bdir, final); err != nil {
		// Another build of the same content may have won the race; that bundle is the same.
		if _, serr := os.Stat(final); serr != nil {
			return Bundle{}, fmt.Errorf("image store: %w", err)
		}
	}
	if err := store.setName(cfg.Name, digest); err != nil {
		return Bundle{}, err
	}
	return store.Get(digest)
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

// buildPlan is what plan found: resolved inputs and warnings.
type buildPlan struct {
	goTool    string
	manifests []string       // absolute paths, sorted by name
	mainDirs  map[int]string // spec.images index -> absolute package directory
	tarPaths  map[int]string // spec.images index -> absolute tar path
	warnings  []string
}

// plan checks every input before anything is built and reports every problem at once, each
// naming its field and the fix.
func plan(ctx context.Context, ni *v1alpha1.NodeImage, base string) (*buildPlan, error) {
	p := &buildPlan{mainDirs: map[int]string{}, tarPaths: map[int]string{}}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	resolve := func(rel string) string {
		if filepath.IsAbs(rel) {
			return filepath.Clean(rel)
		}
		return filepath.Join(base, rel)
	}

	k := ni.Spec.Kubernetes
	if k.Distribution == "upstream" && k.Version != kubebin.Version {
		fail("spec.kubernetes.version: the upstream distribution runs the Kubernetes herd pins, %s (got %s): remove the field or set it to %s", kubebin.Version, k.Version, kubebin.Version)
	}

	var uses []imageUse
	mdir := resolve(ni.Spec.Manifests)
	if fi, err := os.Stat(mdir); err != nil || !fi.IsDir() {
		fail("spec.manifests: %s is not a directory (looked for %s): create it with the Kubernetes YAML to apply at boot, or fix the path (relative to the NodeImage file)", ni.Spec.Manifests, mdir)
	} else {
		files, err := manifestFiles(mdir)
		if err != nil {
			fail("spec.manifests: %v", err)
		} else if len(files) == 0 {
			fail("spec.manifests: %s holds no .yaml, .yml or .json file: add the Kubernetes manifests to apply at boot", ni.Spec.Manifests)
		}
		for _, f := range files {
			u, err := checkManifest(f)
			if err != nil {
				fail("spec.manifests: %v", err)
			}
			uses = append(uses, u...)
		}
		p.manifests = files
	}

	// The pause image is always built, so the Go toolchain is always needed.
	goTool, err := exec.LookPath("go")
	if err != nil {
		fail("herd image build needs the Go toolchain to build the pause image and spec.images[].main, and `go` is not on PATH: install Go from https://go.dev/dl/ and put its bin directory on PATH")
	}
	p.goTool = goTool
	for i, im := range ni.Spec.Images {
		field := fmt.Sprintf("spec.images[%d]", i)
		if _, err := name.NewTag(im.Name); err != nil {
			fail("%s.name: %q is not an image reference such as \"hello:v1\": %v", field, im.Name, err)
		} else if sameImage(im.Name, PauseImage) {
			fail("%s.name: %s is the pause image herd builds into every bundle: give the image another name", field, im.Name)
		}
		switch {
		case im.Main != "":
			d := resolve(im.Main)
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				fail("%s.main: %s is not a directory (looked for %s): give the directory of a Go main package, relative to the NodeImage file", field, im.Main, d)
				continue
			}
			if goTool != "" {
				if err := checkMainPackage(ctx, goTool, d); err != nil {
					fail("%s.main: %s is not a Go main package: %v", field, im.Main, err)
					continue
				}
			}
			p.mainDirs[i] = d
		case im.Tar != "":
			t := resolve(im.Tar)
			if fi, err := os.Stat(t); err != nil || !fi.Mode().IsRegular() {
				fail("%s.tar: %s is not a file (looked for %s): give an image tar (docker save, or an OCI layout tar), relative to the NodeImage file", field, im.Tar, t)
				continue
			}
			if err := checkImageTarShape(t); err != nil {
				fail("%s.tar: %s: %v", field, im.Tar, err)
				continue
			}
			p.tarPaths[i] = t
		}
	}
	p.warnings = imageWarnings(uses, ni.Spec.Images)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// manifestFiles lists the .yaml, .yml and .json files of dir (not its subdirectories), sorted.
func manifestFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// imageUse is a container image a manifest names.
type imageUse struct {
	where      string // "deployment.yaml document 1 (Deployment hello)"
	image      string
	pullPolicy string
}

// checkManifest checks that every document of a manifest file parses and has apiVersion and kind,
// and returns the container images it names.
func checkManifest(path string) ([]imageUse, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	base := filepath.Base(path)
	docs := [][]byte{data}
	if !strings.EqualFold(filepath.Ext(path), ".json") {
		docs = v1alpha1.SplitDocuments(data)
	}
	var uses []imageUse
	for i, doc := range docs {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %v", base, i+1, err)
		}
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%s: document %d: not a Kubernetes object (a mapping with apiVersion and kind)", base, i+1)
		}
		kind, _ := obj["kind"].(string)
		if av, _ := obj["apiVersion"].(string); av == "" || kind == "" {
			return nil, fmt.Errorf("%s: document %d: apiVersion and kind are required in every Kubernetes object", base, i+1)
		}
		objName, _ := nested(obj, "metadata", "name").(string)
		where := fmt.Sprintf("%s: %s %s", base, kind, objName)
		walkContainers(obj, func(c map[string]any) {
			img, _ := c["image"].(string)
			pp, _ := c["imagePullPolicy"].(string)
			uses = append(uses, imageUse{where: where, image: img, pullPolicy: pp})
		})
	}
	return uses, nil
}

func nested(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// walkContainers calls fn for every container (in containers, initContainers or
// ephemeralContainers lists) anywhere in a decoded object.
func walkContainers(v any, fn func(map[string]any)) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c := t[k]
			if k == "containers" || k == "initContainers" || k == "ephemeralContainers" {
				if list, ok := c.([]any); ok {
					for _, e := range list {
						if m, ok := e.(map[string]any); ok {
							if _, has := m["image"]; has {
								fn(m)
							}
						}
					}
					continue
				}
			}
			walkContainers(c, fn)
		}
	case []any:
		for _, e := range t {
			walkContainers(e, fn)
		}
	}
}

// imageWarnings flags containers whose image an instance cannot get: instances pull nothing, so
// every image must be baked in and must not be pulled.
func imageWarnings(uses []imageUse, images []v1alpha1.AppImage) []string {
	var out []string
	seen := map[string]bool{}
	for _, u := range uses {
		var w string
		baked := false
		for _, im := range images {
			if sameImage(u.image, im.Name) {
				baked = true
			}
		}
		switch {
		case !baked:
			w = fmt.Sprintf("%s uses image %q, which is not in spec.images: instances pull no images, so its pods will not start; add it to spec.images", u.where, u.image)
		case u.pullPolicy == "Always":
			w = fmt.Sprintf("%s pulls image %q (imagePullPolicy: Always): instances pull no images; set imagePullPolicy: Never", u.where, u.image)
		case u.pullPolicy == "" && pullsByDefault(u.image):
			w = fmt.Sprintf("%s: image %q has no tag or the tag latest, which Kubernetes pulls by default: set imagePullPolicy: Never", u.where, u.image)
		}
		if w != "" && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// sameImage says whether two references name the same image once normalized
// ("hello:v1" and "docker.io/library/hello:v1" do).
func sameImage(a, b string) bool {
	if a == b {
		return true
	}
	ra, err := name.ParseReference(a)
	if err != nil {
		return false
	}
	rb, err := name.ParseReference(b)
	if err != nil {
		return false
	}
	return ra.Name() == rb.Name()
}

// pullsByDefault says whether Kubernetes' default pull policy for ref is Always (no tag, or the
// tag latest, and no digest).
func pullsByDefault(ref string) bool {
	if strings.Contains(ref, "@") {
		return false
	}
	t, err := name.NewTag(ref)
	if err != nil {
		return false
	}
	return t.TagStr() == "latest"
}

// goEnv is the environment of every go command herd runs: static linux binaries for this
// machine's architecture.
func goEnv(extra ...string) []string {
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	return append(env, extra...)
}

// checkMainPackage asks go list whether dir holds a main package.
func checkMainPackage(ctx context.Context, goTool, dir string) error {
	cmd := exec.CommandContext(ctx, goTool, "list", "-f", "{{.Name}}", ".")
	cmd.Dir = dir
	cmd.Env = goEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return errors.New(msg)
		}
		return err
	}
	if pkg := strings.TrimSpace(stdout.String()); pkg != "main" {
		return fmt.Errorf("it is package %s; an image's binary must be built from package main", pkg)
	}
	return nil
}

// goBuild builds the main package in dir into out, reproducibly: the same source and toolchain
// give the same bytes.
func goBuild(ctx context.Context, goTool, dir, out string, extraEnv []string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = goEnv(extraEnv...)
	output, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if msg := strings.TrimSpace(string(output)); msg != "" {
			return errors.New(msg)
		}
		return err
	}
	return nil
}

// buildPause builds the embedded pause program and writes its image to images/pause.tar of the
// bundle.
func buildPause(ctx context.Context, goTool, scratch, bdir string) (ImageRecord, error) {
	bin, err := buildPauseBinary(ctx, goTool, scratch)
	if err != nil {
		return ImageRecord{}, err
	}
	img, err := binaryImage(bin, "pause", nil, filepath.Join(scratch, "layer-pause.tar"), "herd image build: pause")
	if err != nil {
		return ImageRecord{}, fmt.Errorf("packaging the pause image: %w", err)
	}
	const file = "images/pause.tar"
	rec, err := writeImageTar(PauseImage, img, filepath.Join(bdir, filepath.FromSlash(file)), file)
	if err != nil {
		return ImageRecord{}, fmt.Errorf("writing the pause image: %w", err)
	}
	return rec, nil
}

// buildPauseBinary writes the embedded pause program into a temporary module under scratch,
// builds it and returns the binary's path.
func buildPauseBinary(ctx context.Context, goTool, scratch string) (string, error) {
	src := filepath.Join(scratch, "pause-src")
	if err := os.MkdirAll(src, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(pauseGoMod), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), pauseSource, 0o600); err != nil {
		return "", err
	}
	bin := filepath.Join(scratch, "pause-bin", "pause")
	if err := goBuild(ctx, goTool, src, bin, []string{"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod"}); err != nil {
		return "", fmt.Errorf("building the pause image with %s failed:\n%w", goTool, err)
	}
	return bin, nil
}

// copyFile copies src to dst and returns the digest and size (File left empty).
func copyFile(src, dst string) (FileRecord, error) {
	data, err := os.ReadFile(src)
	if err != nil {
		return FileRecord{}, err
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		return FileRecord{}, err
	}
	return FileRecord{Digest: digestBytes(data), Size: int64(len(data))}, nil
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
