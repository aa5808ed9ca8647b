// The root tree: mmdebstrap's tar unpacked onto a tmpfs in the tar's (sorted) order, and
// containerd's store after it in lexical order (preload.go), so that directories list their
// entries in the same order on every build host, with every time stamp set to the epoch.

package disk

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// tree is the unpacked root on its tmpfs.
type tree struct {
	dir     string
	paths   []string // every entry, slash-separated from "/", in the tar's order
	kernel  string   // the boot files taken out of /boot
	initrd  string
	mounted bool
	size    int64 // bytes of regular files, for the file system's size
}

// unpack mounts a tmpfs and unpacks root.tar onto it. /boot's kernel and initrd go into the
// unified kernel image instead of the root.
func (b *build) unpack() (*tree, error) {
	t := &tree{dir: b.path("tree")}
	if err := os.Mkdir(t.dir, 0o755); err != nil {
		return nil, err
	}
	if err := unix.Mount("tmpfs", t.dir, "tmpfs", 0, "mode=0755,size=8g"); err != nil {
		return nil, fmt.Errorf("mounting a tmpfs for the root tree (needs root): %w", err)
	}
	t.mounted = true
	f, err := os.Open(b.path("root.tar"))
	if err != nil {
		t.close()
		return nil, err
	}
	defer f.Close()
	if err := t.extract(tar.NewReader(f), b); err != nil {
		t.close()
		return nil, fmt.Errorf("unpacking the root tree: %w", err)
	}
	if t.kernel == "" || t.initrd == "" {
		t.close()
		return nil, errors.New("the root has no /boot/vmlinuz-* or /boot/initrd.img-*: is linux-image-cloud-amd64 installed?")
	}
	return t, nil
}

// stamp sets every entry's time stamps to the epoch, once the tree is complete: children before
// parents, as creating an entry changes its directory's.
func (t *tree) stamp(epoch time.Time) error {
	ts := []unix.Timespec{unix.NsecToTimespec(epoch.UnixNano()), unix.NsecToTimespec(epoch.UnixNano())}
	for i := len(t.paths) - 1; i >= 0; i-- {
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, t.host(t.paths[i]), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return nil
}

// host is where a path of the root is on the host.
func (t *tree) host(p string) string { return filepath.Join(t.dir, filepath.FromSlash(p)) }

func (t *tree) extract(tr *tar.Reader, b *build) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		p := path.Clean("/" + h.Name)
		if strings.ContainsAny(p, "\"\n") {
			return fmt.Errorf("%q: a path debugfs cannot be told", p)
		}
		if dir, file := path.Split(p); dir == "/boot/" {
			switch {
			case strings.HasPrefix(file, "vmlinuz-"):
				t.kernel = b.path("vmlinuz")
				if err := writeReader(t.kernel, tr); err != nil {
					return err
				}
			case strings.HasPrefix(file, "initrd.img-"):
				t.initrd = b.path("initrd.img")
				if err := writeReader(t.initrd, tr); err != nil {
					return err
				}
			}
			continue
		}
		if err := t.create(p, h, tr); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		t.paths = append(t.paths, p)
	}
}

// create makes one entry with its owner, mode and extended attributes.
func (t *tree) create(p string, h *tar.Header, r io.Reader) error {
	dst := t.host(p)
	mode := uint32(h.Mode & 0o7777)
	switch h.Typeflag {
	case tar.TypeDir:
		if p != "/" {
			if err := os.Mkdir(dst, 0o700); err != nil && !os.IsExist(err) {
				return err
			}
		}
	case tar.TypeReg:
		f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, r)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		t.size += (n + 4095) &^ 4095
	case tar.TypeSymlink:
		return errors.Join(os.Symlink(h.Linkname, dst), os.Lchown(dst, h.Uid, h.Gid))
	case tar.TypeLink:
		return os.Link(t.host(path.Clean("/"+h.Linkname)), dst)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		kind := map[byte]uint32{tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO}[h.Typeflag]
		if err := unix.Mknod(dst, kind|mode, int(unix.Mkdev(uint32(h.Devmajor), uint32(h.Devminor)))); err != nil {
			return err
		}
	default:
		return fmt.Errorf("tar entry type %q not supported", h.Typeflag)
	}
	if err := os.Lchown(dst, h.Uid, h.Gid); err != nil {
		return err
	}
	// After chown, which clears set-user-id and set-group-id bits.
	if err := unix.Chmod(dst, mode); err != nil {
		return err
	}
	for k, v := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			if err := unix.Lsetxattr(dst, name, []byte(v), 0); err != nil {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	return nil
}

// debugfsScript sets every inode's change and access times to the epoch: mke2fs -d copies them
// from the tree, where the change time is when the tree was made (no call sets it) and reading
// a file moves the access time.
func (t *tree) debugfsScript(epoch int64) string {
	var sb strings.Builder
	for _, p := range append([]string{"/lost+found"}, t.paths...) {
		fmt.Fprintf(&sb, "sif \"%s\" ctime %d\nsif \"%s\" atime %d\n", p, epoch, p, epoch)
	}
	return sb.String()
}

// close unmounts the tmpfs, which frees the tree.
func (t *tree) close() {
	if t.mounted {
		if err := unix.Unmount(t.dir, 0); err == nil {
			t.mounted = false
		}
	}
}

func writeReader(dst string, r io.Reader) error {
	f, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
