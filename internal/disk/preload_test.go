package disk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	bolt "go.etcd.io/bbolt"

	"herd.dev/herd/internal/agent/distro/upstream"
	"herd.dev/herd/internal/image/containerdstore"
	"herd.dev/herd/internal/image/containerdstore/storetest"
)

// TestIntegrationPreloadReproducible imports a two-layer image (the second layer deletes a file
// of the first: a whiteout) with the build's containerd twice, onto two trees, and wants the
// same trees: entries, modes, owners, contents, extended attributes and device numbers, and the
// image in containerd's metadata, unpacked.
func TestIntegrationPreloadReproducible(t *testing.T) {
	bun := storetest.Bundle(t)
	var sums []string
	var entries [][]string
	for i := range 2 {
		work, err := os.MkdirTemp("", "herd-preload-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(work)
		b := &build{o: Options{Bundle: bun, Progress: func(string) {}}, work: work, epoch: DefaultEpoch}
		tr := &tree{dir: filepath.Join(work, "tree")}
		if err := os.Mkdir(tr.dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := b.preload(context.Background(), tr); err != nil {
			t.Fatal(err)
		}
		if err := tr.stamp(b.epoch); err != nil {
			t.Fatal(err)
		}
		sum, lines := treeSum(t, tr)
		for _, f := range containerdstore.BoltFiles {
			lines = append(lines, boltDump(t, filepath.Join(tr.host(upstream.ContainerdRoot(StateDir)), f))...)
		}
		sums, entries = append(sums, sum), append(entries, lines)
		root := tr.host(upstream.ContainerdRoot(StateDir))
		snaps, err := filepath.Glob(filepath.Join(root, "io.containerd.snapshotter.v1.overlayfs", "snapshots", "*", "fs", "app", "hello"))
		if err != nil || len(snaps) != 1 {
			t.Fatalf("the first layer's app/hello in the snapshots: %v %v", snaps, err)
		}
		// app/gone: a file in the first layer's snapshot, a whiteout (a character device) in the
		// second's.
		gone, err := filepath.Glob(filepath.Join(root, "io.containerd.snapshotter.v1.overlayfs", "snapshots", "*", "fs", "app", "gone"))
		if err != nil || len(gone) != 2 {
			t.Fatalf("app/gone in the snapshots: %v %v, want it in both", gone, err)
		}
		var kinds []fs.FileMode
		for _, g := range gone {
			fi, err := os.Lstat(g)
			if err != nil {
				t.Fatal(err)
			}
			kinds = append(kinds, fi.Mode().Type())
		}
		if kinds[0] != 0 || kinds[1] != fs.ModeDevice|fs.ModeCharDevice {
			t.Fatalf("app/gone in the snapshots: %v, want a file and then a whiteout (a character device)", kinds)
		}
		db, err := bolt.Open(filepath.Join(root, containerdstore.BoltFiles[0]), 0, &bolt.Options{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		err = db.View(func(tx *bolt.Tx) error {
			if tx.Bucket([]byte("v1")).Bucket([]byte(upstream.ContainerdNamespace)).Bucket([]byte("images")).Bucket([]byte("docker.io/library/test:v1")) == nil {
				return fmt.Errorf("no image docker.io/library/test:v1 in containerd's metadata")
			}
			return nil
		})
		db.Close()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("build %d: %s", i, sums[i])
	}
	if sums[0] != sums[1] {
		for i := range max(len(entries[0]), len(entries[1])) {
			a, b := "", ""
			if i < len(entries[0]) {
				a = entries[0][i]
			}
			if i < len(entries[1]) {
				b = entries[1][i]
			}
			if a != b {
				t.Errorf("entry %d differs:\n%s\n%s", i, a, b)
			}
		}
		t.Fatalf("two preloads of the same image gave different trees: %s and %s", sums[0], sums[1])
	}
}

// treeSum is a digest of every entry of a tree: its path, mode, owner, device, time stamps,
// extended attributes, link target and contents digest, each a line of the list it returns too.
func treeSum(t *testing.T, tr *tree) (string, []string) {
	h := sha256.New()
	var lines []string
	err := filepath.WalkDir(tr.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == tr.dir {
			return err // the tree's own directory is not on the disk
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		x, err := xattrs(p)
		if err != nil {
			return err
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k+"="+x[k])
		}
		sort.Strings(keys)
		line := fmt.Sprintf("%s %o %d:%d %d %d %v", strings.TrimPrefix(p, tr.dir), st.Mode, st.Uid, st.Gid, st.Rdev, st.Mtim.Sec, keys)
		switch {
		case fi.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			line += " " + hex.EncodeToString(sum[:])
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		}
		lines = append(lines, line)
		fmt.Fprintln(h, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil)), lines
}

// boltDump lists every bucket, key and value of a bbolt database, a line each.
func boltDump(t *testing.T, file string) []string {
	db, err := bolt.Open(file, 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var lines []string
	var walk func(prefix string, b *bolt.Bucket) error
	walk = func(prefix string, b *bolt.Bucket) error {
		lines = append(lines, fmt.Sprintf("%s seq=%d", prefix, b.Sequence()))
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return walk(prefix+"/"+string(k), b.Bucket(k))
			}
			lines = append(lines, fmt.Sprintf("%s/%s = %x", prefix, k, v))
			return nil
		})
	}
	err = db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error { return walk(filepath.Base(file)+":"+string(name), b) })
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines
}
