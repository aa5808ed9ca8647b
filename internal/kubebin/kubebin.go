// Package kubebin finds the upstream Kubernetes binaries (kube-apiserver,
// kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl) that
// `make kubernetes` (hack/kubernetes/build.sh) builds into herd's cache
// directory:
//
//	$HERD_CACHE_DIR/kubernetes/<Version>/bin/
//
// HERD_CACHE_DIR defaults to $XDG_CACHE_HOME/herd, and that to ~/.cache/herd.
package kubebin

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Version is the Kubernetes release herd's local instances run. It must match
// the version of k8s.io/kubernetes pinned in hack/kubernetes/go.mod.
const Version = "v1.33.13"

// Components lists the binaries `make kubernetes` builds.
var Components = []string{
	"kube-apiserver",
	"kube-controller-manager",
	"kube-scheduler",
	"kubelet",
	"kube-proxy",
	"kubectl",
	// kube-combined runs several of the components above in one process (hack/kubernetes/combined).
	"kube-combined",
}

// ErrNotBuilt is wrapped by the errors of Dir and Path when the binaries have
// not been built.
var ErrNotBuilt = errors.New("kubernetes binaries not built")

// CacheDir returns herd's cache directory: $HERD_CACHE_DIR, else
// $XDG_CACHE_HOME/herd, else ~/.cache/herd (os.UserCacheDir).
func CacheDir() (string, error) {
	if d := os.Getenv("HERD_CACHE_DIR"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding herd's cache directory (set HERD_CACHE_DIR): %w", err)
	}
	return filepath.Join(d, "herd"), nil
}

// BinDir returns where `make kubernetes` puts the binaries of Version,
// whether or not they exist.
func BinDir() (string, error) {
	c, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, "kubernetes", Version, "bin"), nil
}

// Dir returns the directory holding the binaries of Version, or an error
// wrapping ErrNotBuilt that names the fix when it does not exist.
func Dir() (string, error) {
	d, err := BinDir()
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(d)
	if err != nil || !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is missing; run make kubernetes", ErrNotBuilt, d)
	}
	return d, nil
}

// Path returns the path of one binary (e.g. "kubelet") of Version, or an
// error wrapping ErrNotBuilt that names the fix when it is missing.
func Path(name string) (string, error) {
	if !slices.Contains(Components, name) {
		return "", fmt.Errorf("kubebin: unknown component %q (want one of %v)", name, Components)
	}
	d, err := BinDir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(d, name)
	fi, err := os.Stat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("%w: %s is missing; run make kubernetes", ErrNotBuilt, p)
	case err != nil:
		return "", fmt.Errorf("kubebin: %w", err)
	case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
		return "", fmt.Errorf("%w: %s is not an executable file; run make kubernetes", ErrNotBuilt, p)
	}
	return p, nil
}
