// Package storetest makes image archives for the tests of containerd stores.
package storetest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"herd.dev/herd/internal/image/bundle"
)

// Bundle is a bundle in a temporary directory with one image, test:v1 (DockerArchive), for an
// integration test that imports it with the host's containerd: it skips under -short and when
// not root, and fails when containerd or ctr is missing.
func Bundle(t *testing.T) bundle.Bundle {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: containerd")
	}
	for _, tool := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found: run make deps", tool)
		}
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "images", "test.tar"), DockerArchive(t), 0o644); err != nil {
		t.Fatal(err)
	}
	return bundle.Bundle{Digest: "sha256:0123456789abcdef", Dir: dir, Config: bundle.Config{Images: []bundle.ImageRecord{{Ref: "test:v1", File: "images/test.tar"}}}}
}

// DockerArchive is an image as docker save writes it: app/hello and app/gone in a first layer,
// app/gone deleted by a second.
func DockerArchive(t testing.TB) []byte {
	layer := func(files map[string]string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		mt := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
		names := make([]string, 0, len(files))
		for n := range files {
			names = append(names, n)
		}
		sort.Strings(names)
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "app/", Mode: 0o755, ModTime: mt})
		for _, n := range names {
			tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o755, Size: int64(len(files[n])), ModTime: mt})
			tw.Write([]byte(files[n]))
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	l1 := layer(map[string]string{"app/hello": "#!/bin/sh\necho hello\n", "app/gone": "soon gone\n"})
	l2 := layer(map[string]string{"app/.wh.gone": ""})
	sum := func(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }
	config := fmt.Sprintf(`{"architecture":"amd64","os":"linux","config":{"Cmd":["/app/hello"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s","sha256:%s"]}}`, sum(l1), sum(l2))
	manifest := fmt.Sprintf(`[{"Config":"%s.json","RepoTags":["test:v1"],"Layers":["%s/layer.tar","%s/layer.tar"]}]`, sum([]byte(config)), sum(l1), sum(l2))
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range []struct {
		name string
		data []byte
	}{
		{sum([]byte(config)) + ".json", []byte(config)},
		{sum(l1) + "/layer.tar", l1},
		{sum(l2) + "/layer.tar", l2},
		{"manifest.json", []byte(manifest)},
	} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: 0o644, Size: int64(len(f.data))}); err != nil {
			t.Fatal(err)
		}
		tw.Write(f.data)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}
