package kubebin

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestCacheDir(t *testing.T) {
	t.Run("HERD_CACHE_DIR wins", func(t *testing.T) {
		t.Setenv("HERD_CACHE_DIR", "/x/herd-cache")
		t.Setenv("XDG_CACHE_HOME", "/y")
		got, err := BinDir()
		if err != nil {
			t.Fatal(err)
		}
		if want := "/x/herd-cache/kubernetes/" + Version + "/bin"; got != want {
			t.Errorf("BinDir() = %q, want %q", got, want)
		}
	})
	t.Run("XDG_CACHE_HOME next", func(t *testing.T) {
		t.Setenv("HERD_CACHE_DIR", "")
		t.Setenv("XDG_CACHE_HOME", "/y")
		got, err := CacheDir()
		if err != nil {
			t.Fatal(err)
		}
		if got != "/y/herd" {
			t.Errorf("CacheDir() = %q, want /y/herd", got)
		}
	})
}

func TestMissingNamesTheFix(t *testing.T) {
	t.Setenv("HERD_CACHE_DIR", t.TempDir())
	if _, err := Dir(); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "run make kubernetes") {
		t.Errorf("Dir() error = %v, want ErrNotBuilt naming `make kubernetes`", err)
	}
	if _, err := Path("kubelet"); !errors.Is(err, ErrNotBuilt) || !strings.Contains(err.Error(), "run make kubernetes") {
		t.Errorf("Path(kubelet) error = %v, want ErrNotBuilt naming `make kubernetes`", err)
	}
}

func TestPath(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HERD_CACHE_DIR", cache)
	bin := filepath.Join(cache, "kubernetes", Version, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "kubelet"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "kube-proxy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	if d, err := Dir(); err != nil || d != bin {
		t.Errorf("Dir() = %q, %v; want %q, nil", d, err, bin)
	}
	if p, err := Path("kubelet"); err != nil || p != filepath.Join(bin, "kubelet") {
		t.Errorf("Path(kubelet) = %q, %v", p, err)
	}
	if _, err := Path("kube-proxy"); !errors.Is(err, ErrNotBuilt) {
		t.Errorf("Path(kube-proxy) of a non-executable file: error = %v, want ErrNotBuilt", err)
	}
	if _, err := Path("kubeadm"); err == nil || errors.Is(err, ErrNotBuilt) {
		t.Errorf("Path(kubeadm) error = %v, want an unknown-component error", err)
	}
}

// Version must stay equal to what hack/kubernetes builds.
func TestVersionMatchesBuildModule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "hack", "kubernetes", "go.mod"))
	if err != nil {
		t.Fatalf("hack/kubernetes/go.mod, which pins what make kubernetes builds, is part of the repository: %v", err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v1\.\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("no k8s.io/kubernetes requirement in hack/kubernetes/go.mod")
	}
	if got := string(m[1]); got != Version {
		t.Errorf("hack/kubernetes/go.mod pins k8s.io/kubernetes %s, kubebin.Version is %s", got, Version)
	}
}
