package cli

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/disk"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/kubebin"
	"herd.dev/herd/internal/provider/local"
)

func newImageDiskCmd(g *globals, store func() *image.Store) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "disk NAME|DIGEST [-o FILE]",
		Short: "Make a raw, bootable UEFI disk image of a node image",
		Long: `Make a raw disk image that boots (UEFI) straight into one instance of the node image: a
minimal Debian 12 from Debian's packages (mmdebstrap), Debian's cloud kernel, systemd,
containerd, runc, the CNI plugins, etcd, iptables, conntrack, the pinned Kubernetes components,
herd-agent (started at boot) and the bundle. The instance's name and address are made at first
boot from a NoCloud seed (a vfat or ISO 9660 file system labelled cidata with user-data) or EC2's
IMDSv2 user data; none is baked in. The same node image gives the same disk, byte for byte
(every time stamp is SOURCE_DATE_EPOCH, or 2023-06-10 when it is unset).

Needs root, a Debian mirror (apt's), and mmdebstrap, e2fsprogs, dosfstools, mtools, fdisk,
binutils and systemd-boot-efi (make deps). Prints the disk's digest, size and allocated size
(the file is sparse).`,
		Example: `  herd image disk hello -o hello.raw
  qemu-system-x86_64 -machine q35 -m 4G -bios /usr/share/ovmf/OVMF.fd \
    -drive file=hello.raw,format=raw,if=virtio -drive file=seed.img,format=raw,if=virtio`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			b, err := resolveBundle(store(), args[0])
			if err != nil {
				return err
			}
			self, err := os.Executable()
			if err != nil {
				return err
			}
			kube, err := kubebin.Dir()
			if err != nil {
				return err
			}
			if output == "" {
				output = b.Config.Name + ".raw"
			}
			r, err := disk.Build(cmd.Context(), disk.Options{
				Bundle:     b,
				Agent:      local.AgentBinary(self),
				KubeBinDir: kube,
				Output:     output,
				Progress:   func(line string) { fmt.Fprintln(g.errOut, line) },
			})
			if err != nil {
				return err
			}
			if err := disk.SaveRecord(filepath.Join(store().Root(), "disks"), b.Digest, r); err != nil {
				fmt.Fprintf(g.errOut, "herd image ls and push will not know this disk: %v\n", err)
			}
			fmt.Fprintf(g.out, "disk %s: %s size_mb=%d allocated_mb=%d\n", r.Path, r.Digest, r.Size>>20, r.Allocated>>20)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "disk file to write (default NAME.raw, NAME the node image's)")
	return cmd
}
