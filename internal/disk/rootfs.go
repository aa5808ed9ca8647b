// The root file system: Debian's packages by mmdebstrap, and herd's files over them.

package disk

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"

	"herd.dev/herd/internal/image/bundle"
	"herd.dev/herd/internal/kubebin"
)

// Packages are the Debian packages of the root, besides mmdebstrap's minbase variant (the
// essential packages and apt).
var Packages = []string{
	"linux-image-cloud-amd64", "initramfs-tools", "kmod", "udev",
	"systemd", "systemd-sysv", "dbus",
	"containerd", "runc", "containernetworking-plugins", "etcd-server",
	"iptables", "nftables", "conntrack", "iproute2",
}

// Where herd's files are on the disk.
const (
	BundleDir = "/usr/lib/herd/bundle"
	CacheDir  = "/usr/lib/herd/cache" // HERD_CACHE_DIR: kubebin's kubernetes/<version>/bin
	AgentPath = "/usr/local/bin/herd-agent"
	StateDir  = "/var/lib/herd/agent"
)

// kubeComponents are the kubebin binaries the agent runs: kube-combined alone, which runs the
// API server, the controller manager, the scheduler, the kubelet and kube-proxy in one process.
// The components' own binaries would be 410 MB more of the same code; kubectl is left out too,
// as nothing on the node calls it.
var kubeComponents = []string{"kube-combined"}

// earlyFiles are in place before the packages are installed: the initrd that the kernel's
// package makes holds only what finds the root (virtio for QEMU and KVM, NVMe for EC2's EBS, ext4)
// rather than most of the kernel's drivers, and it is made once.
var earlyFiles = map[string]string{
	"/etc/initramfs-tools/conf.d/herd": "MODULES=list\nCOMPRESS=gzip\n",
	"/etc/initramfs-tools/hooks/herd": `#!/bin/sh
[ "$1" = prereqs ] && exit 0
. /usr/share/initramfs-tools/hook-functions
manual_add_modules virtio_pci virtio_blk virtio_scsi sd_mod nvme ext4 crc32c_generic
`,
}

// The files herd adds, by path on the disk.
var overlayFiles = map[string]string{
	"/etc/systemd/system/herd-agent.service": `[Unit]
Description=herd instance (herd-agent machine)
# The seed's label link (/dev/disk/by-label/cidata) is udev's: wait for its first pass.
Wants=network-online.target systemd-udev-settle.service
After=network-online.target local-fs.target systemd-udev-settle.service

[Service]
Environment=HERD_CACHE_DIR=` + CacheDir + `
ExecStart=` + AgentPath + ` machine --images-preloaded --bundle ` + BundleDir + ` --state-dir ` + StateDir + `
# A failed boot (a component that exited on a machine too slow for it) is tried again: the state
# directory keeps etcd's data, so the second boot has less to do.
Restart=on-failure
RestartSec=5
# The agent stops the workload and the cluster itself on SIGTERM.
KillMode=mixed
TimeoutStopSec=60
Delegate=yes
# A mount namespace of its own (slave to the machine's), as the agent wants: its containers'
# mounts stay in it.
PrivateMounts=yes
LimitNOFILE=1048576
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
`,
	"/etc/systemd/network/80-herd.network": "[Match]\nName=en* eth*\n\n[Network]\nDHCP=ipv4\n",
	"/etc/modules-load.d/herd.conf":        "overlay\nbr_netfilter\nbridge\nveth\nnf_conntrack\n",
	"/etc/sysctl.d/80-herd.conf":           "net.ipv4.ip_forward=1\nnet.bridge.bridge-nf-call-iptables=1\n",
	// x-systemd.growfs: systemd-growfs grows the mounted root to its partition, after
	// systemd-repart (repart.d below) has grown the partition to the end of the disk.
	"/etc/fstab":                 "LABEL=root / ext4 rw,noatime,x-systemd.growfs 0 1\n",
	"/etc/repart.d/50-root.conf": "[Partition]\nType=root\n",
	"/etc/hostname":              "localhost\n",
	"/etc/hosts":                 "127.0.0.1 localhost\n::1 localhost\n",
}

// customize runs in the chroot after the packages: the services herd runs itself are disabled
// (the agent runs its own containerd and etcd), herd's and the network's are enabled, and what a
// node does not need goes. The machine id is
// made at first boot.
const customize = `set -e
systemctl disable containerd.service etcd.service
systemctl enable herd-agent.service systemd-networkd.service
rm -rf /var/cache/apt/* /var/lib/apt/lists/* /var/cache/debconf/*-old /var/lib/dpkg/*-old \
	/var/log/* /usr/share/doc /usr/share/man /usr/share/info /usr/share/locale /usr/share/lintian \
	/var/lib/dbus/machine-id /var/lib/systemd/random-seed /etc/ssh/ssh_host_* /root/.bash_history \
	/etc/udev/hwdb.bin /usr/lib/udev/hwdb.bin
printf 'uninitialized\n' >/etc/machine-id
`

// rootfs writes root.tar: mmdebstrap's minbase with Packages and herd's files.
func (b *build) rootfs(ctx context.Context) error {
	early, overlay := b.path("early"), b.path("overlay")
	for p, content := range earlyFiles {
		if err := writeFile(filepath.Join(early, p), []byte(content), 0o755); err != nil {
			return err
		}
	}
	if err := b.stage(overlay); err != nil {
		return err
	}
	args := []string{
		"--variant=minbase", "--mode=root", "--format=tar",
		"--include=" + join(Packages),
		"--aptopt=Apt::Install-Recommends \"false\"",
		"--dpkgopt=force-unsafe-io",
		"--hook-dir=/usr/share/mmdebstrap/hooks/eatmydata",
		// /usr merged by symlinks from the start, as debootstrap does, rather than by the usrmerge
		// package, which pulls in perl (44 MB the node never runs).
		"--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
		"--essential-hook=sync-in " + early + " /",
		"--dpkgopt=path-exclude=/usr/share/man/*",
		"--dpkgopt=path-exclude=/usr/share/doc/*",
		"--dpkgopt=path-exclude=/usr/share/info/*",
		"--dpkgopt=path-exclude=/usr/share/locale/*",
		// What the node never runs: containerd's v1 shims (the agent's containerd runs
		// io.containerd.runc.v2), the CNI plugins besides the four of the agent's network list,
		// and udev's hardware database (vendor and model names; interfaces are named without it).
		"--dpkgopt=path-exclude=/usr/bin/containerd-shim",
		"--dpkgopt=path-exclude=/usr/bin/containerd-shim-runc-v1",
		"--dpkgopt=path-exclude=/usr/lib/cni/*",
		"--dpkgopt=path-include=/usr/lib/cni/bridge",
		"--dpkgopt=path-include=/usr/lib/cni/host-local",
		"--dpkgopt=path-include=/usr/lib/cni/loopback",
		"--dpkgopt=path-include=/usr/lib/cni/portmap",
		"--dpkgopt=path-exclude=/lib/udev/hwdb.d/*", // bookworm's udev still installs under /lib
		"--customize-hook=sync-in " + overlay + " /",
		"--customize-hook=chroot \"$1\" sh -c '" + customize + "'",
		Suite, b.path("root.tar"),
		"deb " + b.o.Mirror + " " + Suite + " main",
		"deb " + b.o.Mirror + " " + Suite + "-updates main",
		"deb " + b.o.Mirror + "-security " + Suite + "-security main",
	}
	cmd := exec.CommandContext(ctx, "mmdebstrap", args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(b.epoch.Unix(), 10), "LC_ALL=C.UTF-8")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("mmdebstrap: %w\n%s", err, tail(out.String(), 4000))
	}
	return nil
}

// stage writes herd's files into dir as they go on the disk: the bundle's configuration and
// manifests (its images go into containerd's store instead: preload.go), the Kubernetes
// components, the agent and overlayFiles.
func (b *build) stage(dir string) error {
	for p, content := range overlayFiles {
		if err := writeFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if err := copyFile(b.o.Agent, filepath.Join(dir, AgentPath), 0o755); err != nil {
		return fmt.Errorf("herd-agent: %w", err)
	}
	bin := filepath.Join(dir, CacheDir, "kubernetes", kubebin.Version, "bin")
	for _, c := range kubeComponents {
		if err := copyFile(filepath.Join(b.o.KubeBinDir, c), filepath.Join(bin, c), 0o755); err != nil {
			return fmt.Errorf("%w (run make kubernetes)", err)
		}
	}
	files := []string{bundle.ConfigFile}
	for _, m := range slices.Concat(b.o.Bundle.Config.Manifests, b.o.Bundle.Config.Store) {
		files = append(files, m.File)
	}
	for _, f := range files {
		if err := copyFile(b.o.Bundle.Path(f), filepath.Join(dir, BundleDir, f), 0o644); err != nil {
			return fmt.Errorf("bundle %s: %w", b.o.Bundle.ShortDigest(), err)
		}
	}
	return nil
}

func writeFile(path string, data []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, data, mode)
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func join(s []string) string {
	var buf bytes.Buffer
	for i, p := range s {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString(p)
	}
	return buf.String()
}

// tail is the end of a command's output, for an error.
func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
