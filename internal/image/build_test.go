// Tests of Build's outcome: deterministic digests, the bundle's layout, which input changes give a
// new digest, cancellation, and the naming and formatting helpers.

package image

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"herd.dev/herd/internal/image/bundle"
)

func TestBuildIsDeterministic(t *testing.T) {
	// The same project in two places, built into two stores: the same digest, byte for byte.
	s1, s2 := newStore(t), newStore(t)
	b1, lines := build(t, fixture(t, nil), s1)
	b2, _ := build(t, fixture(t, nil), s2)
	if b1.Digest != b2.Digest {
		t.Fatalf("digests differ: %s and %s", b1.Digest, b2.Digest)
	}
	for _, im := range b1.Config.Images {
		d, _, err := bundle.DigestFile(b2.Path(im.File))
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
	// The warm store: an etcd data directory, recorded and checked like every other file.
	var store []string
	for _, f := range c.Store {
		store = append(store, f.File)
	}
	if !slices.Contains(store, "store/member/snap/db") || !slices.ContainsFunc(store, func(f string) bool {
		return strings.HasPrefix(f, "store/member/wal/") && strings.HasSuffix(f, ".wal")
	}) {
		t.Errorf("warm store files %v, want store/member/snap/db and a write-ahead log (make kubernetes)", store)
	}
	if err := b.Verify(); err != nil {
		t.Error(err)
	}
	fi, err := os.Stat(s.Root())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("store root mode %v (%v), want 0700", fi.Mode().Perm(), err)
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
