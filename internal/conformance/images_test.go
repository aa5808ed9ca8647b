package conformance

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeSources stands in for the programs built from the Kubernetes modules and the module's
// data files; the Debian programs are this host's.
func fakeSources(t *testing.T) Sources {
	for _, p := range []string{"/bin/busybox", "/bin/bash", "/usr/bin/dig", "/usr/bin/curl", "/bin/nc.openbsd", "/usr/bin/etcd"} {
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed (hack/install-deps.sh installs it)", p)
		}
	}
	bin, module := t.TempDir(), t.TempDir()
	for _, f := range []string{"agnhost", "nnp", "sample-apiserver"} {
		if err := os.WriteFile(filepath.Join(bin, f), []byte("#!/bin/sh\necho "+f+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"agnhost/porter/localhost.crt", "agnhost/porter/localhost.key",
		"nautilus/html/nautilus.jpg", "nautilus/html/data.json", "kitten/html/kitten.jpg", "kitten/html/data.json"} {
		p := filepath.Join(module, "test/images", f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Sources{Bin: bin, Module: module}
}

// files lists the single layer of the image ref in the docker-archive at path, by name.
func files(t *testing.T, path, ref string) (map[string]*tar.Header, []string, []string, string) {
	t.Helper()
	tag, err := name.NewTag(ref)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatalf("%s: %v", ref, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		out["/"+h.Name] = h
	}
	return out, cf.Config.Entrypoint, cf.Config.Cmd, cf.Config.User
}

func TestBuildImages(t *testing.T) {
	dir := t.TempDir()
	got, err := BuildImages(fakeSources(t), dir, func(s string) { t.Log(s) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(Images) {
		t.Fatalf("built %d images, want %d", len(got), len(Images))
	}

	agn, entry, cmd, _ := files(t, got[Registry+"agnhost:2.53"], Registry+"agnhost:2.53")
	if len(entry) != 1 || entry[0] != "/agnhost" || len(cmd) != 1 || cmd[0] != "pause" {
		t.Errorf("agnhost entrypoint %q cmd %q, want [/agnhost] [pause]", entry, cmd)
	}
	for _, p := range []string{"/agnhost", "/bin/sh", "/usr/bin/dig", "/usr/bin/getent", "/usr/bin/nc", "/usr/bin/ss",
		"/lib64/ld-linux-x86-64.so.2", "/localhost.crt", "/etc/group"} {
		if agn[p] == nil {
			t.Errorf("agnhost has no %s", p)
		}
	}
	if h := agn["/uploads"]; h == nil || h.Typeflag != tar.TypeDir {
		t.Errorf("agnhost's /uploads = %+v, want a directory", h)
	}
	if h := agn["/agnhost-2"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "agnhost" {
		t.Errorf("agnhost-2 = %+v, want a link to agnhost", h)
	}
	if h := agn["/bin/sh"]; h == nil || h.Typeflag != tar.TypeReg {
		t.Errorf("agnhost's /bin/sh = %+v, want bash, not busybox's shell (which prefers its own nc)", h)
	}
	if h := agn["/bin/ls"]; h == nil || h.Linkname != "/bin/busybox" {
		t.Errorf("agnhost's /bin/ls = %+v, want a link to busybox", h)
	}

	bb, _, _, _ := files(t, got[Registry+"busybox:1.36.1-1"], Registry+"busybox:1.36.1-1")
	if h := bb["/bin/sh"]; h == nil || h.Typeflag != tar.TypeReg {
		t.Errorf("busybox's /bin/sh = %+v, want bash (busybox 1.35's shell drops env names such as data-1)", h)
	}
	for _, p := range []string{"/bin/sysctl", "/sbin/sysctl", "/bin/env"} {
		if h := bb[p]; h == nil || h.Linkname != "/bin/busybox" {
			t.Errorf("busybox's %s = %+v, want a link to busybox", p, h)
		}
	}

	nnp, _, _, _ := files(t, got[Registry+"nonewprivs:1.3"], Registry+"nonewprivs:1.3")
	if h := nnp["/usr/local/bin/nnp"]; h == nil || h.Mode&0o4000 == 0 || h.Uid != 0 {
		t.Errorf("nnp = %+v, want setuid root", h)
	}
	if _, _, _, user := files(t, got[Registry+"nonroot:1.4"], Registry+"nonroot:1.4"); user != "1234" {
		t.Errorf("nonroot runs as %q, want 1234", user)
	}
	web, _, cmd, _ := files(t, got[Registry+"httpd:2.4.38-4"], Registry+"httpd:2.4.38-4")
	if web["/usr/local/apache2/htdocs/index.html"] == nil || len(cmd) == 0 || cmd[0] != "httpd" {
		t.Errorf("httpd: cmd %q, index.html %v", cmd, web["/usr/local/apache2/htdocs/index.html"])
	}
	if etcd, _, _, _ := files(t, got["registry.k8s.io/etcd:3.5.21-0"], "registry.k8s.io/etcd:3.5.21-0"); etcd["/usr/local/bin/etcd"] == nil {
		t.Error("the etcd image has no /usr/local/bin/etcd, which the aggregator test runs")
	}
}
