// The bundle's images in containerd's store on the root, unpacked, so that the instance's
// containerd finds them at boot and nothing is imported or pulled then (under emulation on a
// loaded host, importing them took 5 of the 12 minutes of a boot).
//
// A containerd of the build host (Debian's, the version the root gets) imports the image tars,
// one after the other, as the agent would at boot, into a root of its own; that root's image
// parts are then copied onto the tree where the agent's containerd keeps its root. Before
// containerd stops, its garbage collector runs to the end (what the imports left unreferenced
// would otherwise be there or not, as its timing goes). containerd's two bbolt databases (its
// metadata, and the overlay snapshotter's) are what a build would still make differently: their
// records carry the time they were made, and their free pages keep what was deleted meanwhile
// (the unpack's scratch snapshots, named with a random part). Each is written again into a fresh
// file with the same buckets, keys and sequences and every time stamp at the epoch, a bucket a
// transaction in key order (copyBucket), which gives the same bytes for the same records.

package disk

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"syscall"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/agent/distro/upstream"
)

// storeDirs are the parts of containerd's root that hold images: the blobs, the metadata, and
// the unpacked layers. The rest (the runtimes' and the CRI plugin's state) is made at boot.
var storeDirs = []string{
	"io.containerd.content.v1.content",
	"io.containerd.metadata.v1.bolt",
	"io.containerd.snapshotter.v1.overlayfs",
}

// boltFiles are the bbolt databases in storeDirs.
var boltFiles = []string{
	"io.containerd.metadata.v1.bolt/meta.db",
	"io.containerd.snapshotter.v1.overlayfs/metadata.db",
}

// preload imports the bundle's images into a containerd store and copies its image parts onto
// the tree, under the agent's containerd root.
func (b *build) preload(ctx context.Context, t *tree) error {
	dir := b.path("containerd")
	root, sock := filepath.Join(dir, "root"), filepath.Join(dir, "c.sock")
	if len(sock) > 100 {
		return fmt.Errorf("work directory %s: too long a path for containerd's socket; give a shorter one", b.work)
	}
	from := time.Now().Add(-time.Minute)
	if err := b.importImages(ctx, dir, root, sock); err != nil {
		return err
	}
	to := time.Now().Add(time.Minute)
	for _, f := range boltFiles {
		if err := normaliseBolt(filepath.Join(root, f), b.epoch, from, to); err != nil {
			return fmt.Errorf("containerd's %s: %w", f, err)
		}
	}
	dst := upstream.ContainerdRoot(StateDir)
	if err := t.mkdirs(dst, 0o700); err != nil {
		return err
	}
	for _, d := range storeDirs {
		if err := t.addHost(filepath.Join(root, d), path.Join(dst, d)); err != nil {
			return fmt.Errorf("copying containerd's %s onto the root: %w", d, err)
		}
	}
	return nil
}

// importImages runs a containerd on root and imports the images into it, then stops it.
func (b *build) importImages(ctx context.Context, dir, root, sock string) error {
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.native"]

[grpc]
  address = %q
`, root, filepath.Join(dir, "state"), sock)
	conf, logPath := filepath.Join(dir, "config.toml"), b.path("containerd.log")
	if err := writeFile(conf, []byte(config), 0o600); err != nil {
		return err
	}
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command("containerd", "--config", conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("containerd (hack/install-deps.sh installs it): %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			return err
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			return errors.New("containerd did not stop within 30 s of SIGTERM")
		}
	}
	defer stop()
	fail := func(err error) error {
		return fmt.Errorf("%w\ncontainerd's log:\n%s", err, tailFile(logPath, 3000))
	}

	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			stopped = true
			return false, fmt.Errorf("containerd exited: %v", err)
		default:
		}
		c, err := net.Dial("unix", sock)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
	if err != nil {
		return fail(fmt.Errorf("containerd for the images: %w", err))
	}
	ctr := func(args ...string) error {
		return run(ctx, nil, "ctr", append([]string{"--address", sock, "--namespace", upstream.ContainerdNamespace}, args...)...)
	}
	// One after the other, in the bundle's order: snapshots are numbered as they are made.
	for _, im := range b.o.Bundle.Config.Images {
		b.o.Progress("image " + im.Ref)
		if err := ctr("images", "import", b.o.Bundle.Path(im.File)); err != nil {
			return fail(fmt.Errorf("importing %s: %w", im.Ref, err))
		}
	}
	// What the imports left unreferenced (the index each import writes, a scratch snapshot) goes
	// now, and not whenever containerd's collector would have come to it: deleting a lease with
	// --sync runs the garbage collector and waits for it.
	if err := errors.Join(ctr("leases", "create", "--id", "herd-disk-gc"), ctr("leases", "delete", "--sync", "herd-disk-gc")); err != nil {
		return fail(fmt.Errorf("collecting containerd's garbage: %w", err))
	}
	if err := stop(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Exited() {
			return fail(err)
		}
	}
	return nil
}

// normaliseBolt writes the bbolt database at file again, into a fresh file: the same buckets,
// keys, values and sequences, but every value that is a time stamp between from and to (a
// time.Time in its binary form, as containerd keeps them) set to epoch.
func normaliseBolt(file string, epoch, from, to time.Time) error {
	fi, err := os.Stat(file)
	if err != nil {
		return err
	}
	src, err := bolt.Open(file, 0, &bolt.Options{ReadOnly: true, Timeout: 10 * time.Second})
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := file + ".new"
	os.Remove(tmp)
	// NoSync: one sync at the end rather than one per transaction.
	dst, err := bolt.Open(tmp, fi.Mode().Perm(), &bolt.Options{NoSync: true})
	if err != nil {
		return err
	}
	stamp := func(v []byte) []byte {
		var t time.Time
		if (len(v) != 15 && len(v) != 16) || t.UnmarshalBinary(v) != nil || t.Before(from) || t.After(to) {
			return v
		}
		out, err := epoch.In(t.Location()).MarshalBinary()
		if err != nil {
			return v
		}
		return out
	}
	err = src.View(func(stx *bolt.Tx) error {
		return stx.ForEach(func(name []byte, sb *bolt.Bucket) error {
			return copyBucket(dst, [][]byte{name}, sb, stamp)
		})
	})
	if err := errors.Join(err, dst.Sync(), dst.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, file)
}

// copyBucket copies src into the bucket at path of dst, in key order: its sequence and values in
// one transaction, then each nested bucket in transactions of its own. One bucket a transaction,
// because bbolt allocates the pages of the buckets a transaction changed in the order of a Go
// map, which differs from run to run: the same records written in one transaction gave files
// that differed.
func copyBucket(dst *bolt.DB, path [][]byte, src *bolt.Bucket, stamp func([]byte) []byte) error {
	err := dst.Update(func(tx *bolt.Tx) error {
		// The parents were made by the transactions before.
		var b *bolt.Bucket
		var err error
		if len(path) == 1 {
			b, err = tx.CreateBucket(path[0])
		} else {
			b = tx.Bucket(path[0])
			for _, name := range path[1 : len(path)-1] {
				b = b.Bucket(name)
			}
			b, err = b.CreateBucket(path[len(path)-1])
		}
		if err != nil {
			return err
		}
		if err := b.SetSequence(src.Sequence()); err != nil {
			return err
		}
		return src.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil
			}
			return b.Put(k, stamp(v))
		})
	})
	if err != nil {
		return fmt.Errorf("%s: %w", bytes.Join(path, []byte("/")), err)
	}
	return src.ForEach(func(k, v []byte) error {
		if v != nil {
			return nil
		}
		return copyBucket(dst, append(path[:len(path):len(path)], k), src.Bucket(k), stamp)
	})
}

// mkdirs makes the directory p of the root and its missing parents with mode.
func (t *tree) mkdirs(p string, mode int64) error {
	if p == "/" {
		return nil
	}
	if _, err := os.Lstat(t.host(p)); err == nil {
		return nil
	}
	if err := t.mkdirs(path.Dir(p), mode); err != nil {
		return err
	}
	if err := t.create(p, &tar.Header{Typeflag: tar.TypeDir, Mode: mode}, nil); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	t.paths = append(t.paths, p)
	return nil
}

// addHost copies the host directory src onto the root at dst, in lexical order, with owners,
// modes, extended attributes (overlayfs' opaque directories), device nodes (its whiteouts) and
// hard links.
func (t *tree) addHost(src, dst string) error {
	links := map[[2]uint64]string{}
	return filepath.WalkDir(src, func(hp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, hp)
		if err != nil {
			return err
		}
		p := path.Join(dst, filepath.ToSlash(rel))
		fi, err := os.Lstat(hp)
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(hp); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		if h.Typeflag == tar.TypeReg && st.Nlink > 1 {
			id := [2]uint64{uint64(st.Dev), st.Ino}
			if first, ok := links[id]; ok {
				h.Typeflag, h.Linkname = tar.TypeLink, first
			} else {
				links[id] = p
			}
		}
		if h.PAXRecords, err = xattrs(hp); err != nil {
			return err
		}
		if err := t.createFrom(p, h, hp); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		t.paths = append(t.paths, p)
		return nil
	})
}

// createFrom makes one entry of the root from h, with the contents of the host file hp when it
// is a regular file.
func (t *tree) createFrom(p string, h *tar.Header, hp string) error {
	if h.Typeflag != tar.TypeReg {
		return t.create(p, h, nil)
	}
	f, err := os.Open(hp)
	if err != nil {
		return err
	}
	defer f.Close()
	return t.create(p, h, f)
}

// xattrs are a file's extended attributes as tar's PAX records.
func xattrs(p string) (map[string]string, error) {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		return nil, err
	}
	buf := make([]byte, n)
	if n, err = unix.Llistxattr(p, buf); err != nil {
		return nil, err
	}
	recs := map[string]string{}
	for _, name := range splitNul(buf[:n]) {
		sz, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: xattr %s: %w", p, name, err)
		}
		v := make([]byte, sz)
		if sz, err = unix.Lgetxattr(p, name, v); err != nil {
			return nil, fmt.Errorf("%s: xattr %s: %w", p, name, err)
		}
		recs["SCHILY.xattr."+name] = string(v[:sz])
	}
	return recs, nil
}

func splitNul(b []byte) []string {
	var out []string
	for len(b) > 0 {
		i := 0
		for i < len(b) && b[i] != 0 {
			i++
		}
		if i > 0 {
			out = append(out, string(b[:i]))
		}
		b = b[min(i+1, len(b)):]
	}
	return out
}

// tailFile is the end of a file, for an error.
func tailFile(p string, n int) string {
	data, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	return tail(string(data), n)
}
