// Package disk makes a raw, bootable UEFI disk image of a node image bundle: a machine that boots
// straight into one herd instance.
//
// The disk holds a GPT with two partitions: an EFI system partition with one unified kernel image
// (systemd's EFI stub, Debian's cloud kernel, an initrd and the kernel command line naming the
// root partition) at the removable-media path \EFI\BOOT\BOOTX64.EFI, and an ext4 root: a minimal
// Debian made by mmdebstrap from Debian's packages (systemd, containerd, runc, the CNI plugins,
// etcd, iptables, nftables, conntrack) with the pinned Kubernetes components (kubebin), herd-agent, the
// bundle's configuration and manifests, and its images already in containerd's store and
// unpacked (preload.go), and no package caches, documentation or man pages. systemd starts
// `herd-agent machine` at boot, which learns the instance's name and address from the machine
// (package agent/machine): nothing of an instance's identity is in the image. At first boot
// systemd-repart grows the root partition to the end of the disk and systemd-growfs the file
// system with it, so that a machine with a bigger disk (an AMI launched on a bigger volume) has
// it all.
//
// The build is reproducible: the same bundle, agent and packages give the same disk, byte for
// byte. Every time stamp is SOURCE_DATE_EPOCH (or DefaultEpoch), the root tree is created in
// sorted order so that directories list the same, and the file system UUIDs, the ext4 hash seed,
// the FAT volume id and the GPT's GUIDs are derived from the inputs' digests (ids.go).
//
// rootfs.go makes the root tree, tree.go unpacks and normalises it, layout.go makes the file
// systems and the partitioned disk.
package disk

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"herd.dev/herd/internal/image/bundle"
)

// Mirror is the Debian mirror mmdebstrap installs from by default; Suite its release.
const (
	Mirror = "http://deb.debian.org/debian"
	Suite  = "bookworm"
)

// Options are a disk build's inputs.
type Options struct {
	// Bundle is the node image to bake in. Required.
	Bundle bundle.Bundle
	// Agent is the herd-agent binary. Required.
	Agent string
	// KubeBinDir holds the Kubernetes components (kubebin.Dir()). Required.
	KubeBinDir string
	// Output is the disk file to write. Required.
	Output string
	// WorkDir holds the build's temporary files. Default: os.TempDir().
	WorkDir string
	// Mirror is the Debian mirror. Default: Mirror.
	Mirror string
	// Progress receives a line per step. Default: none.
	Progress func(string)
}

// Result describes a built disk.
type Result struct {
	// Path is the disk file.
	Path string
	// Digest is "sha256:" and the SHA-256 of the whole disk.
	Digest string
	// Size is the disk's size in bytes; Allocated the bytes it takes on the host's file system
	// (the disk is sparse: runs of zeros are holes).
	Size, Allocated int64
	// Epoch is the SOURCE_DATE_EPOCH of every time stamp in it.
	Epoch time.Time
}

// Build makes the disk. It needs root (mmdebstrap's root mode, a tmpfs for the tree), and
// mmdebstrap, mke2fs, debugfs, mkfs.fat, mtools, sfdisk, objcopy, containerd and ctr
// (hack/install-deps.sh).
func Build(ctx context.Context, o Options) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	if o.WorkDir == "" {
		o.WorkDir = os.TempDir()
	}
	if o.Mirror == "" {
		o.Mirror = Mirror
	}
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	agentSum, err := fileDigest(o.Agent)
	if err != nil {
		return Result{}, fmt.Errorf("herd-agent: %w", err)
	}
	epoch, err := sourceDateEpoch()
	if err != nil {
		return Result{}, err
	}
	work, err := os.MkdirTemp(o.WorkDir, "herd-disk-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(work)
	b := &build{o: o, work: work, epoch: epoch, ids: newIDs(o.Bundle.Digest, agentSum), rootFree: rootFree}

	o.Progress("root file system: mmdebstrap " + Suite + " from " + o.Mirror)
	if err := b.rootfs(ctx); err != nil {
		return Result{}, err
	}
	o.Progress("unpacking the root tree in sorted order")
	t, err := b.unpack()
	if err != nil {
		return Result{}, err
	}
	defer t.close()
	o.Progress("the bundle's images into containerd's store on the root, unpacked")
	if err := b.preload(ctx, t); err != nil {
		return Result{}, err
	}
	if err := t.stamp(epoch); err != nil {
		return Result{}, err
	}
	o.Progress("file systems: ext4 root, EFI system partition with a unified kernel image")
	parts, err := b.filesystems(ctx, t)
	if err != nil {
		return Result{}, err
	}
	t.close()
	o.Progress("partitioned disk")
	if err := b.assemble(ctx, parts, o.Output); err != nil {
		return Result{}, err
	}
	return describe(o.Output, epoch)
}

func (o Options) check() error {
	var errs []error
	if o.Bundle.Digest == "" || o.Bundle.Dir == "" {
		errs = append(errs, errors.New("no bundle: build the node image first (herd image build)"))
	}
	if o.Agent == "" {
		errs = append(errs, errors.New("no herd-agent binary: make build puts it beside herd"))
	}
	if o.KubeBinDir == "" {
		errs = append(errs, errors.New("no Kubernetes binaries: run make kubernetes"))
	}
	if o.Output == "" {
		errs = append(errs, errors.New("no output file"))
	}
	return errors.Join(errs...)
}

// build is one disk build's state.
type build struct {
	o     Options
	work  string
	epoch time.Time
	ids   ids
	// rootFree is the root file system's free space.
	rootFree int64
}

func (b *build) path(name string) string { return filepath.Join(b.work, name) }

// DefaultEpoch is every time stamp on a disk when SOURCE_DATE_EPOCH is not set: Debian 12's
// release day. A constant, so that building a node image's disk again gives the same bytes.
var DefaultEpoch = time.Date(2023, 6, 10, 0, 0, 0, 0, time.UTC)

// sourceDateEpoch is $SOURCE_DATE_EPOCH, or DefaultEpoch.
func sourceDateEpoch() (time.Time, error) {
	v := os.Getenv("SOURCE_DATE_EPOCH")
	if v == "" {
		return DefaultEpoch, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH %q: want seconds since 1970 (or unset it)", v)
	}
	return time.Unix(n, 0).UTC(), nil
}

// describe hashes the disk and measures it.
func describe(path string, epoch time.Time) (Result, error) {
	d, err := fileDigest(path)
	if err != nil {
		return Result{}, err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return Result{}, err
	}
	r := Result{Path: path, Digest: "sha256:" + d, Size: fi.Size(), Epoch: epoch}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		r.Allocated = st.Blocks * 512
	}
	return r, nil
}

// fileDigest is the hex SHA-256 of a file.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
