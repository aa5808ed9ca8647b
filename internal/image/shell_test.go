package image

import (
	"archive/tar"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestShellLayer(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "busybox")
	if err := os.WriteFile(bin, []byte("not really busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(dir, "layer.tar")
	if err := writeShellLayer(bin, []string{"sh", "mkdir", "busybox", "rm"}, layer); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(layer)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := map[string]*tar.Header{}
	var order []string
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got[h.Name] = h
		order = append(order, h.Name)
	}
	if h := got["bin/busybox"]; h == nil || h.Size != int64(len("not really busybox")) || h.Mode != 0o755 {
		t.Errorf("bin/busybox: %+v", h)
	}
	for _, a := range []string{"sh", "mkdir", "rm"} {
		if h := got["bin/"+a]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
			t.Errorf("bin/%s is not a link to busybox: %+v", a, h)
		}
	}
	if got["bin/busybox"].Typeflag != tar.TypeReg {
		t.Error("bin/busybox was replaced by a link to itself")
	}
	if h := got["tmp/"]; h == nil || h.Mode != 0o1777 {
		t.Errorf("tmp/: %+v", h)
	}
	// Sorted applets: the same busybox gives the same layer, whatever order --list printed.
	if order[2] != "bin/mkdir" || order[3] != "bin/rm" || order[4] != "bin/sh" {
		t.Errorf("entries not in a fixed order: %v", order)
	}
}
