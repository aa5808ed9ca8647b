// Tests of image tars: a built image loads with its entrypoint and env, and a given tar is read in
// either format or refused when corrupt.

package image

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestImageTarLoadsWithEntrypointAndEnv(t *testing.T) {
	s := newStore(t)
	b, _ := build(t, fixture(t, nil), s)
	for _, tc := range []struct {
		rec   ImageRecord
		entry string
		env   string
	}{
		{b.Config.Images[0], "hello", "GREETING=hi"},
		{b.Config.Images[1], "pause", ""},
	} {
		t.Run(tc.entry, func(t *testing.T) {
			tag, err := name.NewTag(tc.rec.Ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := tarball.ImageFromPath(b.Path(tc.rec.File), &tag)
			if err != nil {
				t.Fatalf("tarball.ImageFromPath: %v", err)
			}
			cf, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cf.Config.Entrypoint, []string{"/" + tc.entry}) {
				t.Errorf("entrypoint %v", cf.Config.Entrypoint)
			}
			if cf.OS != "linux" || cf.Architecture != runtime.GOARCH || !cf.Created.Time.Equal(epoch) {
				t.Errorf("os/arch/created %s/%s/%v", cf.OS, cf.Architecture, cf.Created)
			}
			if tc.env != "" && !slices.Contains(cf.Config.Env, tc.env) {
				t.Errorf("env %v lacks %s", cf.Config.Env, tc.env)
			}
			if !slices.ContainsFunc(cf.Config.Env, func(e string) bool { return strings.HasPrefix(e, "PATH=") }) {
				t.Errorf("env %v has no PATH", cf.Config.Env)
			}
			if id, _ := img.ConfigName(); id.String() != tc.rec.ID {
				t.Errorf("config digest %s, bundle.json says %s", id, tc.rec.ID)
			}
			if err := checkImage(img); err != nil {
				t.Fatal(err)
			}
			layers, err := img.Layers()
			if err != nil || len(layers) != 1 {
				t.Fatalf("%d layers (%v), want 1", len(layers), err)
			}
			hdr, head := layerFile(t, layers[0], tc.entry)
			if hdr.Mode != 0o755 || !hdr.ModTime.Equal(epoch) || hdr.Uid != 0 {
				t.Errorf("binary header mode %o time %v uid %d", hdr.Mode, hdr.ModTime, hdr.Uid)
			}
			if !bytes.HasPrefix(head, []byte("\x7fELF")) {
				t.Errorf("/%s is not an ELF binary", tc.entry)
			}
		})
	}
}

// layerFile returns the header and first bytes of one file of a layer.
func layerFile(t *testing.T, l v1.Layer, file string) (*tar.Header, []byte) {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if err != nil {
			t.Fatalf("%s not in the layer: %v", file, err)
		}
		if hdr.Name == file {
			head := make([]byte, 4)
			_, _ = io.ReadFull(tr, head)
			return hdr, head
		}
	}
}

func TestImagesFromTarFiles(t *testing.T) {
	src, err := random.Image(512, 2)
	if err != nil {
		t.Fatal(err)
	}
	wantID, _ := src.ConfigName()
	dir := t.TempDir()

	// A docker-archive tagged with another name: the bundle retags it with spec.images[].name.
	other, _ := name.NewTag("example.com/other:old")
	if err := tarball.WriteToFile(filepath.Join(dir, "docker.tar"), other, src); err != nil {
		t.Fatal(err)
	}
	// An OCI layout holding the image under a ref.name annotation, tarred.
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := lp.AppendImage(src, layout.WithAnnotations(map[string]string{annotationRefName: "v3"})); err != nil {
		t.Fatal(err)
	}
	tarDir(t, filepath.Join(dir, "oci"), filepath.Join(dir, "oci.tar"))

	ni := fixtureImageYAML + `  - {name: "docker:v2", tar: ` + filepath.Join(dir, "docker.tar") + `}
  - {name: "oci:v3", tar: ` + filepath.Join(dir, "oci.tar") + `}
`
	s := newStore(t)
	file := fixture(t, map[string]string{"image.yaml": ni})
	b, _ := build(t, file, s)
	if len(b.Config.Images) != 4 {
		t.Fatalf("images %+v", b.Config.Images)
	}
	for _, rec := range b.Config.Images[1:3] {
		t.Run(rec.Ref, func(t *testing.T) {
			if rec.ID != wantID.String() {
				t.Errorf("image ID %s, want the source's %s", rec.ID, wantID)
			}
			tag, _ := name.NewTag(rec.Ref)
			img, err := tarball.ImageFromPath(b.Path(rec.File), &tag)
			if err != nil {
				t.Fatalf("not tagged %s: %v", rec.Ref, err)
			}
			if err := checkImage(img); err != nil {
				t.Fatal(err)
			}
		})
	}
	again, _ := build(t, file, newStore(t))
	if again.Digest != b.Digest {
		t.Errorf("images from tars: digests %s and %s", b.Digest, again.Digest)
	}
}

// tarDir writes the regular files under dir into a tar at dst.
func tarDir(t *testing.T, dir, dst string) {
	t.Helper()
	f, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	err = filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptImageTarIsRefused(t *testing.T) {
	src, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tag, _ := name.NewTag("x:1")
	good := filepath.Join(dir, "good.tar")
	if err := tarball.WriteToFile(good, tag, src); err != nil {
		t.Fatal(err)
	}
	// Drop the layer blob from the archive.
	bad := filepath.Join(dir, "bad.tar")
	copyTarExcept(t, good, bad, func(n string) bool { return strings.HasSuffix(n, ".tar.gz") })
	_, err = readImageTar(bad, "x:1", filepath.Join(dir, "work"))
	if err == nil {
		t.Fatal("a docker-archive without its layer was accepted")
	}
	if _, err := readImageTar(good, "x:1", filepath.Join(dir, "work")); err != nil {
		t.Fatalf("good archive refused: %v", err)
	}
}

func copyTarExcept(t *testing.T, src, dst string, drop func(string) bool) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if drop(hdr.Name) {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
