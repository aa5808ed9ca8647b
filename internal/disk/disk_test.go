package disk

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestIDs(t *testing.T) {
	a, b := newIDs("sha256:aa", "bb"), newIDs("sha256:aa", "bb")
	if a != b {
		t.Fatalf("the same inputs gave different ids: %+v and %+v", a, b)
	}
	if c := newIDs("sha256:aa", "cc"); c.rootUUID == a.rootUUID || c.diskGUID == a.diskGUID {
		t.Errorf("another agent gave the same ids: %+v", c)
	}
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for _, u := range []string{a.diskGUID, a.espGUID, a.rootGUID, a.rootUUID, a.hashSeed} {
		if !uuid.MatchString(u) || seen[u] {
			t.Errorf("id %q: want a version 4 UUID of its own", u)
		}
		seen[u] = true
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(a.espVolumeID) {
		t.Errorf("FAT volume id %q: want 8 hex digits", a.espVolumeID)
	}
}

func TestCopySparse(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	data := make([]byte, 1<<20)
	copy(data[8192:], "herd")
	copy(data[len(data)-3:], "end")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	dst, err := os.Create(filepath.Join(dir, "dst"))
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := dst.Truncate(2 << 20); err != nil {
		t.Fatal(err)
	}
	if err := copySparse(dst, src, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if _, err := dst.ReadAt(got, 1<<20); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the copy differs from the source")
	}
	fi, _ := dst.Stat()
	if alloc := fi.Sys().(*syscall.Stat_t).Blocks * 512; alloc > 64<<10 {
		t.Errorf("allocated %d bytes for two non-zero blocks: the zeros were written", alloc)
	}
}

// TestIntegrationFileSystemsReproducible builds the file systems and the disk twice from the
// same small root tar, unpacked a second apart, and wants the same bytes: the change times the
// tree gets when it is unpacked, and the access times mke2fs's reading moves, must not reach the
// disk. It checks the partition table sfdisk reads back too.
func TestIntegrationFileSystemsReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts a tmpfs")
	}
	for _, tool := range []string{"mke2fs", "debugfs", "mkfs.fat", "mcopy", "sfdisk", "objcopy"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run make deps", tool)
		}
	}
	tarball := rootTar(t)
	ctx := context.Background()
	var digests []string
	var lastSecond int64
	for i := range 2 {
		// Each build in a second of its own, so that a change time from the clock would show.
		for time.Now().Unix() == lastSecond {
			time.Sleep(10 * time.Millisecond)
		}
		lastSecond = time.Now().Unix()
		work := t.TempDir()
		if err := os.WriteFile(filepath.Join(work, "root.tar"), tarball, 0o644); err != nil {
			t.Fatal(err)
		}
		b := &build{work: work, epoch: DefaultEpoch, ids: newIDs("sha256:test", "agent"), rootFree: 16 * mib}
		tr, err := b.unpack()
		if err != nil {
			t.Fatal(err)
		}
		if err := tr.stamp(b.epoch); err != nil {
			t.Fatal(err)
		}
		parts, err := b.filesystems(ctx, tr)
		tr.close()
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(work, "disk.raw")
		if err := b.assemble(ctx, parts, out); err != nil {
			t.Fatal(err)
		}
		r, err := describe(out, b.epoch)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("build %d: %s size=%d allocated=%d", i, r.Digest, r.Size, r.Allocated)
		if r.Allocated >= r.Size/4 {
			t.Errorf("allocated %d of %d bytes: the disk is not sparse", r.Allocated, r.Size)
		}
		digests = append(digests, r.Digest)
		if i == 0 {
			dump, err := exec.Command("sfdisk", "--dump", out).Output()
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{b.ids.diskGUID, b.ids.rootGUID, b.ids.espGUID, rootType} {
				if !strings.Contains(strings.ToLower(string(dump)), strings.ToLower(want)) {
					t.Errorf("partition table lacks %s:\n%s", want, dump)
				}
			}
		}
		if d := os.Getenv("HERD_DISK_TEST_KEEP"); d != "" {
			for _, f := range []string{"root.img", "esp.img", "disk.raw"} {
				os.Rename(filepath.Join(work, f), filepath.Join(d, strconv.Itoa(i)+"-"+f))
			}
		}
	}
	if digests[0] != digests[1] {
		t.Fatalf("two builds of the same tree gave %s and %s", digests[0], digests[1])
	}
}

// rootTar is a small root as mmdebstrap writes it: directories, files, a set-user-id file, a
// symbolic and a hard link, a device, and /boot's kernel and initrd.
func rootTar(t *testing.T) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	add := func(h tar.Header, body string) {
		h.ModTime, h.Size = mt, int64(len(body))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	dir := func(n string) { add(tar.Header{Typeflag: tar.TypeDir, Name: n, Mode: 0o755}, "") }
	dir("./")
	dir("./boot/")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "./boot/vmlinuz-6.1.0-test", Mode: 0o644}, "not a kernel")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "./boot/initrd.img-6.1.0-test", Mode: 0o644}, "not an initrd")
	dir("./dev/")
	add(tar.Header{Typeflag: tar.TypeChar, Name: "./dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}, "")
	dir("./etc/")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "./etc/hostname", Mode: 0o644}, "localhost\n")
	dir("./usr/")
	dir("./usr/bin/")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "./usr/bin/su", Mode: 0o4755}, "#!/bin/sh\n")
	add(tar.Header{Typeflag: tar.TypeLink, Name: "./usr/bin/su2", Linkname: "./usr/bin/su"}, "")
	add(tar.Header{Typeflag: tar.TypeSymlink, Name: "./bin", Linkname: "usr/bin"}, "")
	dir("./usr/lib/")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "./usr/lib/os-release", Mode: 0o644}, "ID=debian\n")
	add(tar.Header{Typeflag: tar.TypeReg, Name: "./usr/lib/big", Mode: 0o644}, strings.Repeat("herd", 100000))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
