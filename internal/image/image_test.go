package image

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

const fixtureImageYAML = `apiVersion: herd.dev/v1alpha1
kind: NodeImage
metadata:
  name: hello
spec:
  manifests: manifests
  images:
  - name: "hello:v1"
    main: ./app
    env: {GREETING: hi}
`

const fixtureMain = `package main

import "fmt"

func main() { fmt.Println("hello") }
`

const fixtureDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: hello}
spec:
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      containers:
      - {name: hello, image: "hello:v1", imagePullPolicy: Never}
`

const fixtureService = `apiVersion: v1
kind: Service
metadata: {name: hello}
spec:
  type: NodePort
  selector: {app: hello}
  ports: [{port: 8080, nodePort: 30080}]
`

// fixture writes a NodeImage project (its own Go module) into a new directory and returns the
// NodeImage file's path. files overrides or adds files; an empty value deletes one.
func fixture(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	all := map[string]string{
		"image.yaml":                fixtureImageYAML,
		"go.mod":                    "module example.com/hello\n\ngo 1.20\n",
		"app/main.go":               fixtureMain,
		"manifests/deployment.yaml": fixtureDeployment,
		"manifests/service.yaml":    fixtureService,
		"manifests/README.md":       "not a manifest: ignored\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for p, content := range all {
		if content == "" {
			continue
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "image.yaml")
}

func newStore(t *testing.T) *Store {
	t.Helper()
	return NewStore(filepath.Join(t.TempDir(), "images"))
}

func build(t *testing.T, file string, s *Store) (Bundle, []string) {
	t.Helper()
	var lines []string
	b, err := Build(context.Background(), file, s, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return b, lines
}

// assertEmpty fails unless the store holds no bundle and no build leftovers.
func assertEmpty(t *testing.T, s *Store) {
	t.Helper()
	bs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 0 {
		t.Errorf("store holds %d bundles, want none", len(bs))
	}
	entries, _ := os.ReadDir(s.tmpDir())
	if len(entries) != 0 {
		t.Errorf("store tmp/ holds %d entries (%s...), want none", len(entries), entries[0].Name())
	}
	names, _ := os.ReadDir(s.namesDir())
	if len(names) != 0 {
		t.Errorf("store names/ holds %d entries, want none", len(names))
	}
}

// buildFails builds the fixture with files changed and checks that the build fails with an error
// holding every string of want and leaves nothing in the store.
func buildFails(t *testing.T, files map[string]string, want []string) {
	t.Helper()
	s := newStore(t)
	_, err := Build(context.Background(), fixture(t, files), s, nil)
	if err == nil {
		t.Fatal("Build succeeded")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	assertEmpty(t, s)
}

func TestBuildIsDeterministic(t *testing.T) {
	// The same project in two places, built into two stores: the same digest, byte for byte.
	s1, s2 := newStore(t), newStore(t)
	b1, lines := build(t, fixture(t, nil), s1)
	b2, _ := build(t, fixture(t, nil), s2)
	if b1.Digest != b2.Digest {
		t.Fatalf("digests differ: %s and %s", b1.Digest, b2.Digest)
	}
	for _, im := range b1.Config.Images {
		d, _, err := digestFile(b2.Path(im.File))
		if err != nil || d != im.Digest {
			t.Errorf("%s: digest %s in the second build, %s in the first (%v)", im.File, d, im.Digest, err)
		}
	}
	if err := b1.Verify(); err != nil {
		t.Fatal(err)
	}
	// Building again into the same store finds the bundle already there.
	b3, again := build(t, fixture(t, nil), s1)
	if b3.Digest != b1.Digest || !slices.ContainsFunc(again, func(l string) bool { return strings.HasPrefix(l, "unchanged:") }) {
		t.Fatalf("rebuild: %s, progress %q", b3.Digest, again)
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "go build ./app") }) {
		t.Errorf("progress %q does not show the go build step", lines)
	}
	entries, _ := os.ReadDir(s1.tmpDir())
	if len(entries) != 0 {
		t.Errorf("tmp/ holds %d entries after successful builds", len(entries))
	}
}

func TestBundleLayout(t *testing.T) {
	s := newStore(t)
	b, _ := build(t, fixture(t, nil), s)
	if !strings.HasPrefix(b.Dir, s.Root()) || filepath.Base(b.Dir) != strings.TrimPrefix(b.Digest, "sha256:") {
		t.Errorf("bundle dir %s is not named by its digest under %s", b.Dir, s.Root())
	}
	c := b.Config
	if c.Name != "hello" || c.Kubernetes.Distribution != "upstream" || c.Kubernetes.Version == "" || c.PauseImage != PauseImage {
		t.Errorf("config %+v", c)
	}
	var files []string
	for _, m := range c.Manifests {
		files = append(files, m.File)
	}
	if want := []string{"manifests/deployment.yaml", "manifests/service.yaml"}; !slices.Equal(files, want) {
		t.Errorf("manifests %v, want %v (sorted, README.md left out)", files, want)
	}
	got, err := os.ReadFile(b.Path(c.Manifests[1].File))
	if err != nil || string(got) != fixtureService {
		t.Errorf("service manifest not copied as it is: %q %v", got, err)
	}
	if len(c.Images) != 2 || c.Images[0].Ref != "hello:v1" || c.Images[1].Ref != PauseImage {
		t.Fatalf("images %+v", c.Images)
	}
	if apps := b.AppImages(); len(apps) != 1 || apps[0].Ref != "hello:v1" {
		t.Errorf("AppImages %+v", apps)
	}
	fi, err := os.Stat(s.Root())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("store root mode %v (%v), want 0700", fi.Mode().Perm(), err)
	}
}

func TestImageTarLoadsWithEntrypointAndEnv(t *testing.T) {
	s := newStore(t)
	b, _ := build(t, fixture(t, nil), s)
	for _, tc := range []struct {
		rec   ImageRecord
		entry string
		env   string
	}{
		{b.Config.Images[0], "hello", "GREETING=hi"},
		{b.Config.Images[1], "pause", ""},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			tag, err := name.NewTag(tc.rec.Ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(b.Path(tc.rec.File), &tag)
			if err != nil {
				t.Fatalf("tarball.ImageFromPath: %v", err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, []string{"/" + tc.entry}) {
				t.Errorf("entrypoint %v", cf.Config.Entrypoint)
			}
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Time.Equal(epoch) {
				t.Errorf("os/arch/created %s/%s/%v", cf.OS, cf.Architecture, cf.Created)
			}
			if tc.env != "" && !slices.Contains(cf.Config.Env, tc.env) {
				t.Errorf("env %v lacks %s", cf.Config.Env, tc.env)
			}
			if !slices.ContainsFunc(cf.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
				t.Errorf("env %v has no PATH", cf.Config.Env)
			}
			if id, _ := img.ConfigName(); id.String() != tc.rec.ID {
				t.Errorf("config digest %s, bundle.json says %s", id, tc.rec.ID)
			}
			if err := checkImage(img); err != nil {
				t.Fatal(err)
			}
			layers, err := img.Layers()
			if err != nil || len(layers) != 1 {
				t.Fatalf("%d layers (%v), want 1", len(layers), err)
			}
			hdr, head := layerFile(t, layers[0], tc.entry)
			if hdr.Mode != 0o755 || !hdr.ModTime.Equal(epoch) || hdr.Uid != 0 {
				t.Errorf("binary header mode %o time %v uid %d", hdr.Mode, hdr.ModTime, hdr.Uid)
			}
			if !bytes.HasPrefix(head, []byte("\x7fELF")) {
				t.Errorf("/%s is not an ELF binary", tc.entry)
			}
		})
	}
}

// layerFile returns the header and first bytes of one file of a layer.
func layerFile(t *testing.T, l v1.Layer, file string) (*tar.Header, []byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the layer: %v", file, err)
		}
		if hdr.Name == file {
			head := make([]byte, 4)
			_, _ = io.ReadFull(tr, head)
			return hdr, head
		}
	}
}

func TestChangedInputsChangeDigest(t *testing.T) {
	s := newStore(t)
	base, _ := build(t, fixture(t, nil), s)
	changes := map[string]map[string]string{
		"manifest":   {"manifests/service.yaml": strings.Replace(fixtureService, "30080", "30081", 1)},
		"source":     {"app/main.go": strings.Replace(fixtureMain, `"hello"`, `"hello, world"`, 1)},
		"image env":  {"image.yaml": strings.Replace(fixtureImageYAML, "GREETING: hi", "GREETING: ho", 1)},
		"new file":   {"manifests/configmap.json": `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}}`},
		"image name": {"image.yaml": strings.Replace(fixtureImageYAML, "name: hello\n", "name: hello2\n", 1)},
	}
	seen := map[string]string{base.Digest: "base"}
	for what, files := range changes {
		t.Run(what, func(t *testing.T) {
			b, _ := build(t, fixture(t, files), s)
			if prev, dup := seen[b.Digest]; dup {
				t.Fatalf("changing the %s kept digest %s (same as %s)", what, b.Digest, prev)
			}
			seen[b.Digest] = what
		})
	}
	// The name follows the newest build; the older bundle stays reachable by digest.
	d, err := s.Resolve("hello")
	if err != nil || d == base.Digest {
		t.Errorf("Resolve(hello) = %s, %v; want the latest build, not %s", d, err, base.Digest)
	}
	if got, err := s.Resolve(base.Digest); err != nil || got != base.Digest {
		t.Errorf("Resolve(%s) = %s, %v", base.Digest, got, err)
	}
	all, err := s.List()
	if err != nil || len(all) != len(changes)+1 {
		t.Errorf("List: %d bundles, %v; want %d", len(all), err, len(changes)+1)
	}
}

func TestBadMainPackageLeavesNothing(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"not package main", map[string]string{"app/main.go": "package app\n\nfunc F() {}\n"},
			[]string{"spec.images[0].main: ./app is not a Go main package", "package app"}},
		{"does not compile", map[string]string{"app/main.go": "package main\n\nfunc main() { undefinedThing() }\n"},
			[]string{"spec.images[0].main: go build ./app failed", "undefined: undefinedThing"}},
		{"no such directory", map[string]string{"app/main.go": ""},
			[]string{"spec.images[0].main: ./app is not a directory"}},
		{"no go files", map[string]string{"app/main.go": "", "app/x.txt": "x"},
			[]string{"spec.images[0].main: ./app is not a Go main package"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { buildFails(t, tt.files, tt.want) })
	}
}

func TestInvalidInputsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"missing manifests dir", map[string]string{"manifests/deployment.yaml": "", "manifests/service.yaml": "", "manifests/README.md": ""},
			[]string{"spec.manifests: manifests is not a directory"}},
		{"no manifest files", map[string]string{"manifests/deployment.yaml": "", "manifests/service.yaml": ""},
			[]string{"spec.manifests: manifests holds no .yaml, .yml or .json file"}},
		{"manifest without kind", map[string]string{"manifests/service.yaml": "apiVersion: v1\nmetadata: {name: x}\n"},
			[]string{"spec.manifests: service.yaml: document 1: apiVersion and kind are required"}},
		{"broken yaml", map[string]string{"manifests/service.yaml": fixtureService + "---\nkind: [\n"},
			[]string{"spec.manifests: service.yaml: document 2"}},
		{"wrong upstream version", map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "spec:\n", "spec:\n  kubernetes: {version: v1.20.0}\n", 1)},
			[]string{"spec.kubernetes.version: the upstream distribution runs", "v1.20.0"}},
		{"pause name taken", map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, `"hello:v1"`, `"registry.k8s.io/pause:3.10"`, 1)},
			[]string{"spec.images[0].name: registry.k8s.io/pause:3.10 is the pause image"}},
		{"missing tar", map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "main: ./app", "tar: nope.tar", 1)},
			[]string{"spec.images[0].tar: nope.tar is not a file"}},
		{"not a tar", map[string]string{"junk.tar": "this is not a tar file, just text\n", "image.yaml": strings.Replace(fixtureImageYAML, "main: ./app", "tar: junk.tar", 1)},
			[]string{"spec.images[0].tar: junk.tar:"}},
		{"a fleet", map[string]string{"image.yaml": "apiVersion: herd.dev/v1alpha1\nkind: Fleet\nmetadata: {name: f}\nspec: {image: hello}\n"},
			[]string{"document 1 is a Fleet: apply it with `herd apply -f"}},
		{"invalid spec", map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "main: ./app", "", 1)},
			[]string{"is invalid, nothing was built", "spec.images[0]"}},
		{"several problems at once", map[string]string{
			"manifests/deployment.yaml": "", "manifests/service.yaml": "", "manifests/README.md": "",
			"app/main.go": "package app\n",
		}, []string{"spec.manifests:", "spec.images[0].main:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { buildFails(t, tt.files, tt.want) })
	}
}

func TestWarnsAboutImagesInstancesCannotGet(t *testing.T) {
	s := newStore(t)
	dep := fixtureDeployment + `---
apiVersion: v1
kind: Pod
metadata: {name: side}
spec:
  initContainers: [{name: i, image: "hello:v1", imagePullPolicy: Always}]
  containers: [{name: c, image: nginx}]
`
	_, lines := build(t, fixture(t, map[string]string{"manifests/deployment.yaml": dep}), s)
	joined := strings.Join(lines, "\n")
	for _, w := range []string{
		`warning: deployment.yaml: Pod side uses image "nginx", which is not in spec.images`,
		`warning: deployment.yaml: Pod side pulls image "hello:v1" (imagePullPolicy: Always)`,
	} {
		if !strings.Contains(joined, w) {
			t.Errorf("progress lacks %q:\n%s", w, joined)
		}
	}
	if strings.Contains(joined, "Deployment hello") {
		t.Errorf("warned about a container that is fine:\n%s", joined)
	}
}

func TestImagesFromTarFiles(t *testing.T) {
	src, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantID, _ := src.ConfigName()
	dir := t.TempDir()

	// A docker-archive tagged with another name: the bundle retags it with spec.images[].name.
	other, _ := name.NewTag("example.com/other:old")
	if err := tarball.WriteToFile(filepath.Join(dir, "docker.tar"), other, src); err != nil {
		t.Fatal(err)
	}
	// An OCI layout holding the image under a ref.name annotation, tarred.
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(src, layout.WithAnnotations(map[string]string{annotationRefName: "v3"})); err != nil {
		t.Fatal(err)
	}
	tarDir(t, filepath.Join(dir, "oci"), filepath.Join(dir, "oci.tar"))

	ni := fixtureImageYAML + `  - {name: "docker:v2", tar: ` + filepath.Join(dir, "docker.tar") + `}
  - {name: "oci:v3", tar: ` + filepath.Join(dir, "oci.tar") + `}
`
	s := newStore(t)
	file := fixture(t, map[string]string{"image.yaml": ni})
	b, _ := build(t, file, s)
	if len(b.Config.Images) != 4 {
		t.Fatalf("images %+v", b.Config.Images)
	}
	for _, rec := range b.Config.Images[1:3] {
		t.Run(rec.Ref, func(t *testing.T) {
			if rec.ID != wantID.String() {
				t.Errorf("image ID %s, want the source's %s", rec.ID, wantID)
			}
			tag, _ := name.NewTag(rec.Ref)
			img, err := tarball.ImageFromPath(b.Path(rec.File), &tag)
			if err != nil {
				t.Fatalf("not tagged %s: %v", rec.Ref, err)
			}
			if err := checkImage(img); err != nil {
				t.Fatal(err)
			}
		})
	}
	again, _ := build(t, file, newStore(t))
	if again.Digest != b.Digest {
		t.Errorf("images from tars: digests %s and %s", b.Digest, again.Digest)
	}
}

// tarDir writes the regular files under dir into a tar at dst.
func tarDir(t *testing.T, dir, dst string) {
	t.Helper()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptImageTarIsRefused(t *testing.T) {
	src, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tag, _ := name.NewTag("x:1")
	good := filepath.Join(dir, "good.tar")
	if err := tarball.WriteToFile(good, tag, src); err != nil {
		t.Fatal(err)
	}
	// Drop the layer blob from the archive.
	bad := filepath.Join(dir, "bad.tar")
	copyTarExcept(t, good, bad, func(n string) bool { return strings.HasSuffix(n, ".tar.gz") })
	_, err = readImageTar(bad, "x:1", filepath.Join(dir, "work"))
	if err == nil {
		t.Fatal("a docker-archive without its layer was accepted")
	}
	if _, err := readImageTar(good, "x:1", filepath.Join(dir, "work")); err != nil {
		t.Fatalf("good archive refused: %v", err)
	}
}

func copyTarExcept(t *testing.T, src, dst string, drop func(string) bool) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if drop(hdr.Name) {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestResolveGetRemove(t *testing.T) {
	s := newStore(t)
	if _, err := s.Resolve("hello"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Resolve on an empty store: %v", err)
	}
	if bs, err := s.List(); err != nil || len(bs) != 0 {
		t.Fatalf("List on an empty store: %v %v", bs, err)
	}
	first, _ := build(t, fixture(t, nil), s)
	second, _ := build(t, fixture(t, map[string]string{"manifests/service.yaml": strings.Replace(fixtureService, "30080", "30090", 1)}), s)
	hex2 := strings.TrimPrefix(second.Digest, "sha256:")

	for _, ref := range []string{"hello", second.Digest, "sha256:" + hex2[:12], hex2[:12]} {
		d, err := s.Resolve(ref)
		if err != nil || d != second.Digest {
			t.Errorf("Resolve(%q) = %q, %v; want %s", ref, d, err, second.Digest)
		}
	}
	for _, ref := range []string{"nope", "sha256:0000", "sha256:" + strings.Repeat("0", 64), "../names/hello", "sha256:zz"} {
		if _, err := s.Resolve(ref); err == nil {
			t.Errorf("Resolve(%q) succeeded", ref)
		}
	}
	if _, err := s.Get("hello"); err == nil {
		t.Error("Get accepted a name")
	}
	got, err := s.Get(first.Digest)
	if err != nil || got.Config.Name != "hello" || got.Size == 0 || got.Created.IsZero() {
		t.Fatalf("Get: %+v %v", got, err)
	}
	all, err := s.List()
	if err != nil || len(all) != 2 || all[0].Digest != second.Digest {
		t.Fatalf("List: newest first expected, got %d bundles (%v)", len(all), err)
	}

	// Removing the latest moves the name back to the remaining bundle; removing that drops it.
	if err := s.Remove("hello"); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Resolve("hello"); err != nil || d != first.Digest {
		t.Errorf("after removing the latest, hello = %s, %v; want %s", d, err, first.Digest)
	}
	if _, err := s.Get(second.Digest); !errors.Is(err, ErrNotFound) {
		t.Errorf("removed bundle still readable: %v", err)
	}
	if err := s.Remove(first.Digest); err != nil {
		t.Fatal(err)
	}
	assertEmpty(t, s)
}

func TestCorruptBundleIsDetected(t *testing.T) {
	s := newStore(t)
	b, _ := build(t, fixture(t, nil), s)
	if err := os.WriteFile(b.Path(b.Config.Manifests[0].File), []byte("changed"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := b.Verify(); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("Verify after changing a manifest: %v", err)
	}
	if err := os.WriteFile(filepath.Join(b.Dir, ConfigFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(b.Digest); err == nil || !strings.Contains(err.Error(), "corrupt") {
		t.Errorf("Get after changing bundle.json: %v", err)
	}
}

func TestCancelledBuildLeavesNothing(t *testing.T) {
	// Cancel at each long step, as Ctrl-C would, once the build has started writing.
	for _, step := range []string{"go build ./app", "building the pause"} {
		t.Run(step, func(t *testing.T) {
			s := newStore(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := Build(ctx, fixture(t, nil), s, func(l string) {
				if strings.Contains(l, step) {
					cancel()
				}
			})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Build cancelled at %q: %v, want context.Canceled", step, err)
			}
			assertEmpty(t, s)
		})
	}
}

func TestCleanStaleRemovesOldLeftovers(t *testing.T) {
	s := newStore(t)
	if err := s.init(); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(s.tmpDir(), "build-old")
	fresh := filepath.Join(s.tmpDir(), "build-fresh")
	for _, d := range []string{old, fresh} {
		if err := os.MkdirAll(filepath.Join(d, "bundle"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	if err := os.Chtimes(old, now.Add(-48*time.Hour), now.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	s.cleanStale(now)
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("stale build dir kept: %v", err)
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Errorf("fresh build dir removed: %v", err)
	}
}

func TestPauseExitsZeroOnSIGTERM(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not on PATH")
	}
	bin, err := buildPauseBinary(context.Background(), goTool, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A Go program dies of a SIGTERM that arrives before it calls signal.Notify. Started with
	// SIGINT ignored, the program installs a SIGINT handler only in signal.Notify, which also
	// subscribes SIGTERM first: a caught SIGINT in /proc says the program is ready.
	signal.Ignore(syscall.SIGINT)
	defer signal.Reset(syscall.SIGINT)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitCatches(t, cmd.Process.Pid, syscall.SIGINT)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("pause exited with %v after %v, want status 0", err, sig)
			}
		})
	}
}

// waitCatches waits until process pid has a handler for sig (its SigCgt mask in /proc).
func waitCatches(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if mask, ok := strings.CutPrefix(line, "SigCgt:"); ok {
				m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
				if err == nil && m&(1<<(uint(sig)-1)) != 0 {
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d never caught %v", pid, sig)
}

func TestHelpers(t *testing.T) {
	for ref, want := range map[string]string{"hello:v1": "hello", "registry.example/team/api:v2": "api", "tmp:1": "app", "a.b:1": "a.b"} {
		if got := entryName(ref); got != want {
			t.Errorf("entryName(%q) = %q, want %q", ref, got, want)
		}
	}
	if got := fileSafe("registry.example/team/api:v2"); got != "registry.example-team-api-v2" {
		t.Errorf("fileSafe: %q", got)
	}
	if !sameImage("hello:v1", "docker.io/library/hello:v1") || sameImage("hello:v1", "hello:v2") {
		t.Error("sameImage")
	}
	if !pullsByDefault("nginx") || !pullsByDefault("nginx:latest") || pullsByDefault("nginx:1.25") {
		t.Error("pullsByDefault")
	}
	for n, want := range map[int64]string{999: "999B", 1500: "1.5kB", 2850304: "2.85MB"} {
		if got := FormatSize(n); got != want {
			t.Errorf("FormatSize(%d) = %s, want %s", n, got, want)
		}
	}
}

func TestMissingGoToolchainNamesTheFix(t *testing.T) {
	file := fixture(t, nil)
	t.Setenv("PATH", t.TempDir())
	s := newStore(t)
	_, err := Build(context.Background(), file, s, nil)
	if err == nil || !strings.Contains(err.Error(), "`go` is not on PATH: install Go from https://go.dev/dl/") {
		t.Fatalf("Build without go on PATH: %v", err)
	}
	assertEmpty(t, s)
}
