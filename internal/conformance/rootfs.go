// Package conformance builds what the upstream Kubernetes conformance suite needs to run against
// one real herd instance, and reads its results: the test images the [Conformance] tests use,
// assembled from binaries built from the k8s.io/kubernetes module and from Debian packages
// installed on this host (nothing can be pulled), and the summary of the suite's JUnit report.
package conformance

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"herd.dev/herd/internal/image"
)

// epoch time-stamps every layer entry and image config, so the same inputs give the same image.
var epoch = time.Unix(0, 0).UTC()

// entry is one file of an image's root filesystem: a directory, a regular file (data, or the
// content of a host file read when the layer is written) or a symbolic link.
type entry struct {
	typ      byte
	mode     int64
	data     []byte
	hostPath string
	link     string
}

// rootfs is an image's root filesystem being assembled, by absolute path inside the image.
type rootfs struct {
	entries map[string]entry
}

func newRootfs() *rootfs {
	r := &rootfs{entries: map[string]entry{}}
	r.dir("/tmp", 0o1777)
	return r
}

// clone copies r, so that an image can be built on another's filesystem.
func (r *rootfs) clone() *rootfs {
	c := &rootfs{entries: make(map[string]entry, len(r.entries))}
	for p, e := range r.entries {
		c.entries[p] = e
	}
	return c
}

func (r *rootfs) dir(p string, mode int64) {
	r.entries[path.Clean(p)] = entry{typ: tar.TypeDir, mode: mode}
}

func (r *rootfs) file(p string, mode int64, data []byte) {
	r.entries[path.Clean(p)] = entry{typ: tar.TypeReg, mode: mode, data: data}
}

func (r *rootfs) symlink(p, target string) {
	r.entries[path.Clean(p)] = entry{typ: tar.TypeSymlink, link: target}
}

// hostFile puts the content of the host file src at p; a symbolic link on the host is followed.
func (r *rootfs) hostFile(p, src string, mode int64) error {
	if _, err := os.Stat(src); err != nil {
		return err
	}
	r.entries[path.Clean(p)] = entry{typ: tar.TypeReg, mode: mode, hostPath: src}
	return nil
}

// lddLine matches the libraries ldd lists: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)"
// and the loader "/lib64/ld-linux-x86-64.so.2 (0x...)".
var lddLine = regexp.MustCompile(`(?m)^\s*(?:\S+ => )?(/\S+) \(0x[0-9a-f]+\)$`)

// hostBinary puts the host program src at p with every shared library it loads (as ldd lists
// them) at the same paths, so that a program from a Debian package runs inside the image.
func (r *rootfs) hostBinary(p, src string) error {
	if err := r.hostFile(p, src, 0o755); err != nil {
		return fmt.Errorf("%s is not installed (hack/install-deps.sh installs it): %w", src, err)
	}
	out, err := exec.Command("ldd", src).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "not a dynamic executable") {
			return nil
		}
		return fmt.Errorf("ldd %s: %v: %s", src, err, bytes.TrimSpace(out))
	}
	for _, m := range lddLine.FindAllStringSubmatch(string(out), -1) {
		if err := r.hostFile(m[1], m[1], 0o755); err != nil {
			return fmt.Errorf("library of %s: %w", src, err)
		}
	}
	return nil
}

// busybox lays out Debian's static busybox at /bin/busybox with a link for every applet at the
// path Debian gives it and in /bin, where the busybox image has all of them (the sysctl test
// runs /bin/sysctl): the usual utilities, nothing else.
func (r *rootfs) busybox(src string) error {
	if err := r.hostFile("/bin/busybox", src, 0o755); err != nil {
		return fmt.Errorf("%s is not installed (Debian's busybox-static; hack/install-deps.sh installs it): %w", src, err)
	}
	out, err := exec.Command(src, "--list-full").Output()
	if err != nil {
		return fmt.Errorf("%s --list-full: %w", src, err)
	}
	for _, applet := range strings.Fields(string(out)) {
		for _, p := range []string{"/" + applet, "/bin/" + path.Base(applet)} {
			if p != "/bin/busybox" {
				r.symlink(p, "/bin/busybox")
			}
		}
	}
	return nil
}

// withParents adds a directory entry for every parent of every entry that has none.
func (r *rootfs) withParents() {
	for p := range r.entries {
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if _, ok := r.entries[d]; !ok {
				r.dir(d, 0o755)
			}
		}
	}
}

// writeLayer writes r as an uncompressed layer tar, entries sorted by path (parents first), owned
// by root and time-stamped epoch.
func (r *rootfs) writeLayer(dst string) error {
	r.withParents()
	paths := make([]string, 0, len(r.entries))
	for p := range r.entries {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	for _, p := range paths {
		e := r.entries[p]
		h := &tar.Header{Typeflag: e.typ, Name: strings.TrimPrefix(p, "/"), Mode: e.mode, Linkname: e.link, ModTime: epoch}
		if e.typ == tar.TypeDir {
			h.Name += "/"
		}
		if e.typ == tar.TypeSymlink {
			h.Mode = 0o777
		}
		var body io.Reader
		if e.typ == tar.TypeReg {
			data := e.data
			if e.hostPath != "" {
				if data, err = os.ReadFile(e.hostPath); err != nil {
					return err
				}
			}
			h.Size = int64(len(data))
			body = bytes.NewReader(data)
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if body != nil {
			if _, err := io.Copy(tw, body); err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return out.Close()
}

// writeImage writes r as a one-layer linux image tagged ref, in docker-archive form (what a
// NodeImage's spec.images[].tar takes), at dst; the layer tar is written to layerPath first.
func writeImage(r *rootfs, cfg image.LayerConfig, ref, layerPath, dst string) error {
	if err := r.writeLayer(layerPath); err != nil {
		return fmt.Errorf("%s: writing its layer: %w", ref, err)
	}
	if err := image.WriteLayerImage(layerPath, "herd conformance: "+ref, ref, dst, cfg); err != nil {
		return fmt.Errorf("%s: writing the image: %w", ref, err)
	}
	return nil
}
