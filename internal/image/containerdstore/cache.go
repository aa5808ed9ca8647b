package containerdstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"herd.dev/herd/internal/image/bundle"
	"herd.dev/herd/internal/statefile"
)

// Epoch is the time stamp of every record of a cached store's databases, so that the same bundle
// gives the same store wherever it is prepared.
var Epoch = time.Date(2023, 6, 10, 0, 0, 0, 0, time.UTC)

// Prepared returns the root of a containerd store under cacheDir that holds b's images, unpacked,
// importing them the first time (a few seconds per image):
//
//	<cacheDir>/<hex>/root   the store of the bundle sha256:<hex>; never written once there
//	<cacheDir>/<hex>.lock   held while it is made, so that concurrent callers make it once
//	<cacheDir>/tmp-<hex>-*  a store being made; renamed to <hex> only once complete
//
// Callers give each instance its own copy (Clone) and never write to the returned root.
func Prepared(ctx context.Context, cacheDir string, b bundle.Bundle) (string, error) {
	hex, ok := strings.CutPrefix(b.Digest, "sha256:")
	if !ok || hex == "" || strings.ContainsAny(hex, `/\.`) {
		return "", fmt.Errorf("bundle digest %q: want sha256:<hex>", b.Digest)
	}
	dir := filepath.Join(cacheDir, hex)
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(root); err == nil {
		return root, nil
	}
	if err := os.MkdirAll(cacheDir, 0o700); err != nil {
		return "", err
	}
	lk, err := statefile.Lock(filepath.Join(cacheDir, hex+".lock"))
	if err != nil {
		return "", err
	}
	defer lk.Unlock()
	if _, err := os.Stat(root); err == nil {
		return root, nil // made while this waited for the lock
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	removeUnfinished(cacheDir, hex)
	// A short name: containerd's socket goes in it.
	work, err := os.MkdirTemp(cacheDir, unfinishedPrefix(hex))
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if _, err := Import(ctx, work, b, Epoch, func(string) {}); err != nil {
		return "", fmt.Errorf("preparing containerd's store for bundle %s: %w", b.Digest, err)
	}
	// Only the store stays: the state, config, socket and log were containerd's for the import.
	for _, f := range []string{"state", "config.toml", "c.sock", "containerd.log"} {
		if err := os.RemoveAll(filepath.Join(work, f)); err != nil {
			return "", err
		}
	}
	if err := os.Rename(work, dir); err != nil {
		return "", fmt.Errorf("preparing containerd's store for bundle %s: %w", b.Digest, err)
	}
	return root, nil
}

// unfinishedPrefix begins the name of the work directory of a store of the bundle sha256:hex
// being made.
func unfinishedPrefix(hex string) string { return "tmp-" + hex[:min(12, len(hex))] + "-" }

// removeUnfinished removes the work directories a maker of the store of bundle sha256:hex left
// when it was killed. Called with the bundle's lock held: no one is making that store now. What
// cannot be removed (a mount a killed import left) stays, and does not stop the next making.
func removeUnfinished(cacheDir, hex string) {
	dirs, _ := filepath.Glob(filepath.Join(cacheDir, unfinishedPrefix(hex)+"*"))
	for _, d := range dirs {
		_ = os.RemoveAll(d)
	}
}
