// A NoCloud seed: the user data a disk's agent reads at first boot.

package disk

import (
	"context"
	"errors"
	"os"
	"path/filepath"
)

// Seed writes a NoCloud seed to path: a small FAT file system labelled cidata holding user-data
// and meta-data, to attach to a machine booted from a disk as a second drive.
func Seed(ctx context.Context, path string, userData, metaData []byte) error {
	dir, err := os.MkdirTemp(filepath.Dir(path), ".seed-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ud, md := filepath.Join(dir, "user-data"), filepath.Join(dir, "meta-data")
	if err := errors.Join(os.WriteFile(ud, userData, 0o644), os.WriteFile(md, metaData, 0o644)); err != nil {
		return err
	}
	os.Remove(path)
	if err := run(ctx, nil, "mkfs.fat", "-C", "-n", "CIDATA", path, "2048"); err != nil {
		return err
	}
	env := append(os.Environ(), "MTOOLS_SKIP_CHECK=1")
	return run(ctx, env, "mcopy", "-i", path, ud, md, "::/")
}
