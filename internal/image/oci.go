package image

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// epoch is the time stamped on every file of a layer herd builds and in every image config, so
// that equal inputs give equal bytes.
var epoch = time.Unix(0, 0).UTC()

// defaultPath is the PATH of images herd builds, unless the NodeImage sets one.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// binaryImage packages a static binary as a single-layer linux image for this machine's
// architecture, with the binary at /<entry> as its entrypoint and env in its config. The layer tar
// is written to layerPath, which must stay until the image has been written out.
func binaryImage(binPath, entry string, env map[string]string, layerPath, createdBy string) (v1.Image, error) {
	if err := writeBinaryLayer(binPath, entry, layerPath); err != nil {
		return nil, err
	}
	return layerImage(layerPath, createdBy, LayerConfig{Entrypoint: []string{"/" + entry}, Env: envList(env)})
}

// LayerConfig is what the config of a one-layer image sets besides what every image herd builds
// has: linux, this machine's architecture, every time stamp at epoch, working directory /.
type LayerConfig struct {
	Entrypoint []string
	Cmd        []string
	User       string
	// Env is KEY=VALUE pairs; a PATH of the usual directories comes first unless Env has one.
	Env []string
}

// WriteLayerImage writes the image of the one uncompressed layer tar at layerPath, with cfg,
// tagged ref, as a docker-archive at dst (what a NodeImage's spec.images[].tar takes). Equal
// inputs give equal bytes.
func WriteLayerImage(layerPath, createdBy, ref, dst string, cfg LayerConfig) error {
	img, err := layerImage(layerPath, createdBy, cfg)
	if err != nil {
		return err
	}
	_, err = writeImageTar(ref, img, dst, filepath.Base(dst))
	return err
}

// layerImage is the image of the one layer tar at layerPath with cfg, made reproducibly.
func layerImage(layerPath, createdBy string, cfg LayerConfig) (v1.Image, error) {
	layer, err := tarball.LayerFromFile(layerPath)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{
		Layer:   layer,
		History: v1.History{Created: v1.Time{Time: epoch}, CreatedBy: createdBy},
	})
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Created = v1.Time{Time: epoch}
	cf.OS = "linux"
	cf.Architecture = runtime.GOARCH
	cf.Config.Entrypoint = cfg.Entrypoint
	cf.Config.Cmd = cfg.Cmd
	cf.Config.User = cfg.User
	cf.Config.Env = cfg.Env
	if !slices.ContainsFunc(cfg.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
		cf.Config.Env = append([]string{"PATH=" + defaultPath}, cfg.Env...)
	}
	cf.Config.WorkingDir = "/"
	return mutate.ConfigFile(img, cf)
}

// envList turns env into sorted KEY=VALUE pairs, adding a PATH unless env has one.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env)+1)
	if _, ok := env["PATH"]; !ok {
		out = append(out, "PATH="+defaultPath)
	}
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// writeBinaryLayer writes an uncompressed layer tar holding tmp/ (mode 1777) and the binary at
// <entry> (mode 0755), owned by root, time-stamped epoch.
func writeBinaryLayer(binPath, entry, layerPath string) error {
	bin, err := os.Open(binPath)
	if err != nil {
		return err
	}
	defer bin.Close()
	fi, err := bin.Stat()
	if err != nil {
		return err
	}
	out, err := os.Create(layerPath)
	if err != nil {
		return err
	}
	defer out.Close()
	tw := tar.NewWriter(out)
	hdrs := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch},
		{Typeflag: tar.TypeReg, Name: entry, Mode: 0o755, Size: fi.Size(), ModTime: epoch},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if _, err := io.Copy(tw, bin); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return out.Close()
}

// writeImageTar writes img tagged ref as a docker-archive at dst (which `ctr images import` and
// containerd's Go client read) and returns its record, with file as the bundle-relative name.
func writeImageTar(ref string, img v1.Image, dst, file string) (ImageRecord, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return ImageRecord{}, err
	}
	f, err := os.Create(dst)
	if err != nil {
		return ImageRecord{}, err
	}
	defer f.Close()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(f, h)}
	if err := tarball.Write(tag, img, cw); err != nil {
		return ImageRecord{}, err
	}
	if err := f.Close(); err != nil {
		return ImageRecord{}, err
	}
	id, err := img.ConfigName()
	if err != nil {
		return ImageRecord{}, err
	}
	return ImageRecord{
		Ref:    ref,
		File:   file,
		Digest: "sha256:" + hex.EncodeToString(h.Sum(nil)),
		ID:     id.String(),
		Size:   cw.n,
	}, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// readImageTar opens the image of a docker-archive or OCI-layout tar (for a tar holding several
// images: the one tagged ref) and checks it: a linux image for this machine's architecture whose
// layers match its config's diff IDs. workDir receives an OCI layout's extracted files.
func readImageTar(tarPath, ref, workDir string) (v1.Image, error) {
	entries, err := tarEntryNames(tarPath)
	if err != nil {
		return nil, fmt.Errorf("not a readable tar file: %w", err)
	}
	var img v1.Image
	switch {
	case entries["manifest.json"]:
		img, err = tarball.ImageFromPath(tarPath, nil)
		if err != nil {
			tag, terr := name.NewTag(ref)
			if terr != nil {
				return nil, err
			}
			if img, err = tarball.ImageFromPath(tarPath, &tag); err != nil {
				return nil, fmt.Errorf("docker-archive holds several images and none is tagged %s: %w", ref, err)
			}
		}
	case entries["index.json"] && entries["oci-layout"]:
		if err := extractTar(tarPath, workDir); err != nil {
			return nil, fmt.Errorf("extracting OCI layout: %w", err)
		}
		idx, err := layout.ImageIndexFromPath(workDir)
		if err != nil {
			return nil, fmt.Errorf("reading OCI layout: %w", err)
		}
		if img, err = selectImage(idx, ref, 0); err != nil {
			return nil, err
		}
	default:
		return nil, errNotImageTar
	}
	if err := checkImage(img); err != nil {
		return nil, err
	}
	return img, nil
}

var errNotImageTar = errors.New("not an image tar: it holds neither manifest.json (a docker-archive, as docker save writes) nor index.json and oci-layout (an OCI image layout)")

// checkImageTarShape reads a tar's headers (not its content) and checks that it looks like a
// docker-archive or an OCI layout.
func checkImageTarShape(tarPath string) error {
	entries, err := tarEntryNames(tarPath)
	if err != nil {
		return fmt.Errorf("not a readable tar file: %w", err)
	}
	if !entries["manifest.json"] && !(entries["index.json"] && entries["oci-layout"]) {
		return errNotImageTar
	}
	return nil
}

// checkImage reads every layer of img and checks it against the config.
func checkImage(img v1.Image) error {
	cf, err := img.ConfigFile()
	if err != nil {
		return fmt.Errorf("image config: %w", err)
	}
	if cf.OS != "" && cf.OS != "linux" {
		return fmt.Errorf("the image is for %s/%s; instances run linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if cf.Architecture != "" && cf.Architecture != runtime.GOARCH {
		return fmt.Errorf("the image is for linux/%s; instances run linux/%s", cf.Architecture, runtime.GOARCH)
	}
	layers, err := img.Layers()
	if err != nil {
		return fmt.Errorf("image layers: %w", err)
	}
	if len(layers) != len(cf.RootFS.DiffIDs) {
		return fmt.Errorf("the image has %d layers but its config lists %d diff IDs", len(layers), len(cf.RootFS.DiffIDs))
	}
	for i, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		h := sha256.New()
		_, err = io.Copy(h, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("layer %d: %w", i, err)
		}
		if got, want := "sha256:"+hex.EncodeToString(h.Sum(nil)), cf.RootFS.DiffIDs[i].String(); got != want {
			return fmt.Errorf("layer %d has diff ID %s, the config says %s: the tar is corrupt", i, got, want)
		}
	}
	return nil
}

const (
	annotationRefName        = "org.opencontainers.image.ref.name"
	annotationContainerdName = "io.containerd.image.name"
)

// selectImage picks ref's image from an OCI index: the only image, or the one whose name
// annotation matches ref, and within a multi-platform index the linux image for this machine.
func selectImage(idx v1.ImageIndex, ref string, depth int) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("reading OCI index: %w", err)
	}
	cands := im.Manifests
	if len(cands) > 1 && depth == 0 {
		var named []v1.Descriptor
		for _, d := range cands {
			if refMatches(d.Annotations[annotationRefName], ref) || refMatches(d.Annotations[annotationContainerdName], ref) {
				named = append(named, d)
			}
		}
		if len(named) > 0 {
			cands = named
		}
	}
	if len(cands) > 1 {
		var plat []v1.Descriptor
		for _, d := range cands {
			if d.Platform != nil && d.Platform.OS == "linux" && d.Platform.Architecture == runtime.GOARCH {
				plat = append(plat, d)
			}
		}
		cands = plat
	}
	switch {
	case len(cands) == 0 && depth == 0:
		return nil, fmt.Errorf("the OCI layout holds %d manifests and none is named %s or is for linux/%s", len(im.Manifests), ref, runtime.GOARCH)
	case len(cands) == 0:
		return nil, fmt.Errorf("the OCI index has no image for linux/%s", runtime.GOARCH)
	case len(cands) > 1:
		return nil, fmt.Errorf("the OCI layout holds several images for %s: keep one, or name it with the %s annotation", ref, annotationRefName)
	}
	d := cands[0]
	switch {
	case d.MediaType.IsImage():
		return idx.Image(d.Digest)
	case d.MediaType.IsIndex() && depth < 2:
		child, err := idx.ImageIndex(d.Digest)
		if err != nil {
			return nil, err
		}
		return selectImage(child, ref, depth+1)
	}
	return nil, fmt.Errorf("the OCI layout's manifest %s has media type %s, not an image", d.Digest, d.MediaType)
}

// refMatches says whether an annotation names ref: the same reference, or ref's tag alone.
func refMatches(annotation, ref string) bool {
	if annotation == "" {
		return false
	}
	if annotation == ref {
		return true
	}
	r, err := name.NewTag(ref)
	if err != nil {
		return false
	}
	if annotation == r.TagStr() {
		return true
	}
	a, err := name.NewTag(annotation)
	return err == nil && a.Name() == r.Name()
}

// tarEntryNames lists the cleaned names of a tar's regular files.
func tarEntryNames(p string) (map[string]bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	out := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag == tar.TypeReg {
			out[path.Clean(hdr.Name)] = true
		}
	}
}

// extractTar writes a tar's directories and regular files under dir, refusing paths that leave it.
func extractTar(p, dir string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		n := path.Clean(hdr.Name)
		if n == "." {
			continue
		}
		if path.IsAbs(n) || n == ".." || strings.HasPrefix(n, "../") {
			return fmt.Errorf("entry %q points outside the layout", hdr.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(n))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return err
			}
			if err := out.Close(); err != nil {
				return err
			}
		}
	}
}
