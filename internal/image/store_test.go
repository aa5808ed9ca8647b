// Tests of the Store: resolving, listing and removing bundles, detecting corruption, and cleaning
// up what interrupted builds leave.

package image

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
