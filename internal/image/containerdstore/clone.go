package containerdstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// Clone gives dst (a containerd root, made if missing) the image parts of the store at src,
// cheaply and without sharing anything containerd writes. containerd never writes a content blob
// or an unpacked layer once it is committed: a container's writes go to its own upper directory
// (overlayfs leaves its lower layers alone), and deleting an image or a snapshot unlinks or
// renames entries of directories. So every directory is made anew (its owner, mode, extended
// attributes such as overlayfs' opaque marks, and times as src has them), every other entry is a
// hard link to src's (a copy when dst is on another file system), and the bbolt databases, which
// containerd writes in place, are copied.
func Clone(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	for _, d := range Dirs {
		if err := cloneTree(filepath.Join(src, d), filepath.Join(dst, d)); err != nil {
			return fmt.Errorf("containerd store %s: %w", d, err)
		}
	}
	return nil
}

func cloneTree(src, dst string) error {
	var dirs []string // made, to be given src's times once their entries are in
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			dirs = append(dirs, rel)
			return cloneDir(p, to)
		case slices.Contains(BoltFiles, filepath.Join(filepath.Base(src), rel)):
			return copyFile(p, to)
		default:
			err := os.Link(p, to)
			if errors.Is(err, syscall.EXDEV) {
				return copyEntry(p, to) // the cache is on another file system
			}
			return err
		}
	})
	if err != nil {
		return err
	}
	// Deepest first: setting a directory's times is not an entry change of its parent.
	for _, rel := range slices.Backward(dirs) {
		fi, err := os.Lstat(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		if err := os.Chtimes(filepath.Join(dst, rel), fi.ModTime(), fi.ModTime()); err != nil {
			return err
		}
	}
	return nil
}

// cloneDir makes the directory to with the owner, mode and extended attributes of from.
func cloneDir(from, to string) error {
	fi, err := os.Lstat(from)
	if err != nil {
		return err
	}
	if err := os.Mkdir(to, 0o700); err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	if err := os.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	// After the owner: chown clears setuid and setgid bits.
	if err := os.Chmod(to, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	return copyXattrs(from, to)
}

func copyXattrs(from, to string) error {
	attrs, err := Xattrs(from)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		if err := unix.Lsetxattr(to, name, []byte(attrs[name]), 0); err != nil {
			return fmt.Errorf("%s: xattr %s: %w", to, name, err)
		}
	}
	return nil
}

// Xattrs are the extended attributes of the file p (not following a symbolic link), by name.
func Xattrs(p string) (map[string]string, error) {
	n, err := unix.Llistxattr(p, nil)
	if err != nil || n == 0 {
		return nil, err
	}
	buf := make([]byte, n)
	if n, err = unix.Llistxattr(p, buf); err != nil {
		return nil, err
	}
	attrs := map[string]string{}
	for _, name := range splitNul(buf[:n]) {
		sz, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: xattr %s: %w", p, name, err)
		}
		v := make([]byte, sz)
		if sz, err = unix.Lgetxattr(p, name, v); err != nil {
			return nil, fmt.Errorf("%s: xattr %s: %w", p, name, err)
		}
		attrs[name] = string(v[:sz])
	}
	return attrs, nil
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

// copyEntry copies the file, symbolic link or device node (overlayfs' whiteouts) from to the new
// entry to, with its owner, mode, extended attributes and times.
func copyEntry(from, to string) error {
	fi, err := os.Lstat(from)
	if err != nil {
		return err
	}
	st := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode().IsRegular():
		err = copyFile(from, to)
	case fi.Mode()&fs.ModeSymlink != 0:
		var target string
		if target, err = os.Readlink(from); err == nil {
			err = os.Symlink(target, to)
		}
	case fi.Mode()&fs.ModeDevice != 0:
		err = unix.Mknod(to, st.Mode, int(st.Rdev))
	default:
		return fmt.Errorf("%s: cannot copy a %s", from, fi.Mode().Type())
	}
	if err != nil {
		return err
	}
	if err := os.Lchown(to, int(st.Uid), int(st.Gid)); err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	if err := os.Chmod(to, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky)); err != nil {
		return err
	}
	if err := copyXattrs(from, to); err != nil {
		return err
	}
	return os.Chtimes(to, fi.ModTime(), fi.ModTime())
}

// copyFile copies the regular file from to the new file to, with its mode.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fi.Mode().Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	return errors.Join(err, out.Close())
}
