package disk

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"herd.dev/herd/internal/agent/distro/upstream"
	"herd.dev/herd/internal/image/bundle"
)

// TestNormaliseBolt writes the same records into two databases in different orders, at
// different times, each with a record deleted on the way, and wants the same bytes from both
// once normalised: the time stamps of the build at the epoch, the other times as they were.
func TestNormaliseBolt(t *testing.T) {
	dir := t.TempDir()
	layerTime, err := time.Date(2020, 5, 6, 7, 8, 9, 0, time.UTC).MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	from := time.Now().Add(-time.Minute)
	// Each database's records are made at times of their own within the build.
	write := func(name string, reverse bool, scratch string, made time.Duration) string {
		p := filepath.Join(dir, name)
		db, err := bolt.Open(p, 0o644, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		keys := []string{"sha256:aa", "sha256:bb", "sha256:cc"}
		if reverse {
			keys = []string{"sha256:cc", "sha256:bb", "sha256:aa"}
		}
		for i, k := range keys {
			// A transaction per record, as containerd's, so that pages are freed and reused.
			err := db.Update(func(tx *bolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("v1"))
				if err != nil {
					return err
				}
				if _, err := b.NextSequence(); err != nil {
					return err
				}
				rec, err := b.CreateBucket([]byte(k))
				if err != nil {
					return err
				}
				now, err := from.Add(made + time.Duration(i)*time.Millisecond).UTC().MarshalBinary()
				if err != nil {
					return err
				}
				if err := rec.Put([]byte("createdat"), now); err != nil {
					return err
				}
				if err := rec.Put([]byte("layertime"), layerTime); err != nil {
					return err
				}
				return b.Put([]byte(scratch+k), bytes.Repeat([]byte(scratch), 200))
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		err = db.Update(func(tx *bolt.Tx) error {
			b := tx.Bucket([]byte("v1"))
			for _, k := range keys {
				if err := b.Delete([]byte(scratch + k)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := write("a.db", false, "extract-1-", 10*time.Second), write("b.db", true, "extract-22-", 20*time.Second)
	to := time.Now().Add(time.Minute)
	var files [][]byte
	for _, p := range []string{a, b} {
		if err := normaliseBolt(p, DefaultEpoch, from, to); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, data)
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("the same records gave different files")
	}
	db, err := bolt.Open(a, 0, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(func(tx *bolt.Tx) error {
		v1 := tx.Bucket([]byte("v1"))
		if v1.Sequence() != 3 {
			return fmt.Errorf("sequence %d, want 3", v1.Sequence())
		}
		rec := v1.Bucket([]byte("sha256:bb"))
		if rec == nil {
			return fmt.Errorf("record sha256:bb lost")
		}
		var created time.Time
		if err := created.UnmarshalBinary(rec.Get([]byte("createdat"))); err != nil || !created.Equal(DefaultEpoch) {
			return fmt.Errorf("createdat %v (%v), want the epoch %v", created, err, DefaultEpoch)
		}
		if got := rec.Get([]byte("layertime")); !bytes.Equal(got, layerTime) {
			return fmt.Errorf("a time from before the build was changed")
		}
		if v1.Get([]byte("extract-1-sha256:aa")) != nil {
			return fmt.Errorf("a deleted record came back")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestIntegrationPreloadReproducible imports a two-layer image (the second layer deletes a file
// of the first: a whiteout) with the build's containerd twice, onto two trees, and wants the
// same trees: entries, modes, owners, contents, extended attributes and device numbers, and the
// image in containerd's metadata, unpacked.
func TestIntegrationPreloadReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: containerd")
	}
	for _, tool := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run make deps", tool)
		}
	}
	bdir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bdir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bdir, "images", "test.tar"), dockerArchive(t), 0o644); err != nil {
		t.Fatal(err)
	}
	bun := bundle.Bundle{Digest: "sha256:test", Dir: bdir, Config: bundle.Config{Images: []bundle.ImageRecord{{Ref: "test:v1", File: "images/test.tar"}}}}
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
		for _, f := range boltFiles {
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
		db, err := bolt.Open(filepath.Join(root, boltFiles[0]), 0, &bolt.Options{ReadOnly: true})
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

// dockerArchive is an image as docker save writes it: app/hello and app/gone in a first layer,
// app/gone deleted by a second.
func dockerArchive(t *testing.T) []byte {
	layer := func(files map[string]string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		mt := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "app/", Mode: 0o755, ModTime: mt})
		for _, n := range names {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o755, Size: int64(len(files[n])), ModTime: mt})
			tw.Write([]byte(files[n]))
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	l1 := layer(map[string]string{"app/hello": "#!/bin/sh\necho hello\n", "app/gone": "soon gone\n"})
	l2 := layer(map[string]string{"app/.wh.gone": ""})
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	config := fmt.Sprintf(`{"architecture":"amd64","os":"linux","config":{"Cmd":["/app/hello"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s","sha256:%s"]}}`, sum(l1), sum(l2))
	manifest := fmt.Sprintf(`[{"Config":"%s.json","RepoTags":["test:v1"],"Layers":["%s/layer.tar","%s/layer.tar"]}]`, sum([]byte(config)), sum(l1), sum(l2))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{sum([]byte(config)) + ".json", []byte(config)},
		{sum(l1) + "/layer.tar", l1},
		{sum(l2) + "/layer.tar", l2},
		{"manifest.json", []byte(manifest)},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
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
