// Package containerdstore makes containerd stores that already hold a bundle's images, unpacked,
// so that an instance's containerd finds them at boot and nothing is imported then: the same
// bytes for the same bundle (Import, used by a disk image's build), and a cache of one such store
// per bundle that each local instance gets its own copy of, made of hard links (Prepared, Clone).
//
// A containerd of the host imports the image tars, one after the other, as the agent would at
// boot, into a root of its own. Before containerd stops, its garbage collector runs to the end
// (what the imports left unreferenced would otherwise be there or not, as its timing goes).
// containerd's two bbolt databases (its metadata, and the overlay snapshotter's) are what a build
// would still make differently: their records carry the time they were made, and their free
// pages keep what was deleted meanwhile (the unpack's scratch snapshots, named with a random
// part). Each is written again into a fresh file with the same buckets, keys and sequences and
// every time stamp at the epoch, a bucket a transaction in key order (copyBucket), which gives
// the same bytes for the same records.
package containerdstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"herd.dev/herd/internal/image/bundle"
)

// Dirs are the parts of containerd's root that hold images: the blobs, the metadata, and the
// unpacked layers. The rest (the runtimes' and the CRI plugin's state) is made at boot.
var Dirs = []string{
	"io.containerd.content.v1.content",
	"io.containerd.metadata.v1.bolt",
	"io.containerd.snapshotter.v1.overlayfs",
}

// BoltFiles are the bbolt databases in Dirs: the files containerd writes in place.
var BoltFiles = []string{
	"io.containerd.metadata.v1.bolt/meta.db",
	"io.containerd.snapshotter.v1.overlayfs/metadata.db",
}

// Import imports b's images into a new containerd store at <work>/root with a containerd of the
// host (its log in <work>/containerd.log), time stamps of its databases at epoch, and returns
// that root. progress is told each image as its import starts.
func Import(ctx context.Context, work string, b bundle.Bundle, epoch time.Time, progress func(string)) (string, error) {
	root := filepath.Join(work, "root")
	if err := os.MkdirAll(work, 0o700); err != nil {
		return "", err
	}
	from := time.Now().Add(-time.Minute)
	if err := importImages(ctx, work, root, b, progress); err != nil {
		return "", err
	}
	to := time.Now().Add(time.Minute)
	for _, f := range BoltFiles {
		if err := normaliseBolt(filepath.Join(root, f), epoch, from, to); err != nil {
			return "", fmt.Errorf("containerd's %s: %w", f, err)
		}
	}
	return root, nil
}

// importImages runs a containerd on root and imports the images into it, then stops it.
func importImages(ctx context.Context, dir, root string, b bundle.Bundle, progress func(string)) error {
	d, err := startDaemon(ctx, dir, root)
	if err != nil {
		return err
	}
	defer d.stop()
	// One after the other, in the bundle's order: snapshots are numbered as they are made.
	for _, im := range b.Config.Images {
		progress("image " + im.Ref)
		if err := d.ctr(ctx, "images", "import", b.Path(im.File)); err != nil {
			return d.fail(fmt.Errorf("importing %s: %w", im.Ref, err))
		}
	}
	if err := d.collect(ctx); err != nil {
		return err
	}
	return d.stop()
}

// run runs a command, its output in the error when it fails.
func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, tail(string(out), 2000))
	}
	return nil
}

// tailFile is the end of a file, for an error.
func tailFile(p string, n int) string {
	data, err := os.ReadFile(p)
	if err != nil {
		return err.Error()
	}
	return tail(string(data), n)
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
