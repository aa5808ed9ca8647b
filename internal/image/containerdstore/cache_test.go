package containerdstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"herd.dev/herd/internal/image/containerdstore/storetest"
)

// TestIntegrationPreparedOnceAndClonedApart prepares one bundle's store from two callers at
// once and wants one store; clones it twice and wants the layers and blobs shared (hard links)
// and the databases not, and a clone on another file system a copy; then deletes the image in one clone with its containerd and wants the
// cached store and the other clone as they were, the other clone still listing the image.
func TestIntegrationPreparedOnceAndClonedApart(t *testing.T) {
	ctx := context.Background()
	b := storetest.Bundle(t)
	// Short: containerd's socket goes under it.
	cache, err := os.MkdirTemp("", "hcs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(cache)

	roots := make([]string, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range roots {
		wg.Go(func() { roots[i], errs[i] = Prepared(ctx, cache, b) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("caller %d: %v", i, err)
		}
	}
	if roots[0] != roots[1] {
		t.Fatalf("two callers got two stores: %s and %s", roots[0], roots[1])
	}
	root := roots[0]
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "0123456789abcdef 0123456789abcdef.lock" {
		t.Fatalf("the cache holds %s, want the store and its lock only", got)
	}
	before := treeSums(t, root)

	clones := []string{filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")}
	for _, c := range clones {
		if err := Clone(root, c); err != nil {
			t.Fatal(err)
		}
	}
	// The whiteout (a character device) of the second layer, and the blobs, are the cache's.
	for _, rel := range append(glob(t, root, "io.containerd.snapshotter.v1.overlayfs/snapshots/*/fs/app/gone"), glob(t, root, "io.containerd.content.v1.content/blobs/sha256/*")...) {
		if !sameFile(t, filepath.Join(root, rel), filepath.Join(clones[0], rel)) {
			t.Errorf("%s: the clone's is not a hard link to the cache's", rel)
		}
	}
	for _, rel := range BoltFiles {
		if sameFile(t, filepath.Join(root, rel), filepath.Join(clones[0], rel)) {
			t.Errorf("%s: the clone shares the cache's database, which containerd writes", rel)
		}
	}
	if got := treeSums(t, clones[0]); got != before {
		t.Fatalf("the clone differs from the cached store:\n%s\nwant\n%s", got, before)
	}
	// On another file system (tmpfs) than the cache, a clone is a copy.
	shm, err := os.MkdirTemp("/dev/shm", "hcs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(shm)
	if err := Clone(root, filepath.Join(shm, "c")); err != nil {
		t.Fatalf("cloning onto another file system: %v", err)
	}
	if got := treeSums(t, filepath.Join(shm, "c")); got != before {
		t.Fatalf("the clone on another file system differs from the cached store:\n%s\nwant\n%s", got, before)
	}

	// The first clone's containerd deletes the image and collects its garbage.
	work, err := os.MkdirTemp("", "hcs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(work)
	d, err := startDaemon(ctx, work, clones[0])
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	if err := d.ctr(ctx, "images", "rm", "--sync", "docker.io/library/test:v1"); err != nil {
		t.Fatal(d.fail(err))
	}
	if err := d.collect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := d.stop(); err != nil {
		t.Fatal(err)
	}
	if left := glob(t, clones[0], "io.containerd.snapshotter.v1.overlayfs/snapshots/*/fs/app/hello"); len(left) != 0 {
		t.Fatalf("the image's layers are still in the clone after its deletion: %v", left)
	}
	if got := treeSums(t, root); got != before {
		t.Fatalf("deleting the image in a clone changed the cached store:\n%s\nwant\n%s", got, before)
	}
	if got := treeSums(t, clones[1]); got != before {
		t.Fatalf("deleting the image in a clone changed the other clone:\n%s\nwant\n%s", got, before)
	}
	d, err = startDaemon(ctx, work, clones[1])
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop()
	out, err := exec.Command("ctr", "--address", d.sock, "--namespace", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("docker.io/library/test:v1")) {
		t.Fatalf("the other clone's containerd lists %q (%v), want docker.io/library/test:v1", out, err)
	}
}

func glob(t *testing.T, root, pattern string) []string {
	t.Helper()
	ms, err := filepath.Glob(filepath.Join(root, pattern))
	if err != nil {
		t.Fatal(err)
	}
	for i, m := range ms {
		ms[i], _ = filepath.Rel(root, m)
	}
	return ms
}

func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Lstat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Lstat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}

// treeSums lists the image parts of a containerd root: each entry's path, type, mode, owner and
// contents' digest, device number and extended attributes, a line each.
func treeSums(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	for _, d := range Dirs {
		err := filepath.WalkDir(filepath.Join(root, d), func(p string, e fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := os.Lstat(p)
			if err != nil {
				return err
			}
			st := fi.Sys().(*syscall.Stat_t)
			var sum [32]byte
			if fi.Mode().IsRegular() {
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				sum = sha256.Sum256(data)
			}
			attrs, err := Xattrs(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			lines = append(lines, fmt.Sprintf("%s %s %d:%d %d %x %v", rel, fi.Mode(), st.Uid, st.Gid, st.Rdev, sum[:8], attrs))
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return strings.Join(lines, "\n")
}

// The work directories of a store's making that was killed go before the next making; another
// bundle's, and finished stores, stay.
func TestUnfinishedStoresRemoved(t *testing.T) {
	cache := t.TempDir()
	hex, other := strings.Repeat("a", 64), strings.Repeat("b", 64)
	for _, d := range []string{unfinishedPrefix(hex) + "1/root/io.containerd.content.v1.content", unfinishedPrefix(other) + "2", hex + "/root"} {
		if err := os.MkdirAll(filepath.Join(cache, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	removeUnfinished(cache, hex)
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, e := range entries {
		left = append(left, e.Name())
	}
	if want := []string{hex, unfinishedPrefix(other) + "2"}; !slices.Equal(left, want) {
		t.Fatalf("left %v, want %v", left, want)
	}
}
