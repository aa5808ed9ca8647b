// The bundle's images in containerd's store on the root, unpacked, so that the instance's
// containerd finds them at boot and nothing is imported or pulled then (under emulation on a
// loaded host, importing them took 5 of the 12 minutes of a boot). containerdstore makes the
// store, the same bytes for the same bundle; its image parts are copied onto the tree where the
// agent's containerd keeps its root.

package disk

import (
	"archive/tar"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"syscall"

	"herd.dev/herd/internal/agent/distro/upstream"
	"herd.dev/herd/internal/image/containerdstore"
)

// preload imports the bundle's images into a containerd store and copies its image parts onto
// the tree, under the agent's containerd root.
func (b *build) preload(ctx context.Context, t *tree) error {
	root, err := containerdstore.Import(ctx, b.path("containerd"), b.o.Bundle, b.epoch, b.o.Progress)
	if err != nil {
		return err
	}
	dst := upstream.ContainerdRoot(StateDir)
	if err := t.mkdirs(dst, 0o700); err != nil {
		return err
	}
	for _, d := range containerdstore.Dirs {
		if err := t.addHost(filepath.Join(root, d), path.Join(dst, d)); err != nil {
			return fmt.Errorf("copying containerd's %s onto the root: %w", d, err)
		}
	}
	return nil
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
	attrs, err := containerdstore.Xattrs(p)
	if err != nil || len(attrs) == 0 {
		return nil, err
	}
	recs := map[string]string{}
	for name, v := range attrs {
		recs["SCHILY.xattr."+name] = v
	}
	return recs, nil
}
