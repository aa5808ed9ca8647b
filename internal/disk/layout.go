// The file systems and the partitioned disk.

package disk

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

const (
	mib = 1 << 20
	// gptLead is the space before the first partition (the protective MBR, the GPT and alignment);
	// gptTrail after the last one (the backup GPT).
	gptLead, gptTrail = 1 * mib, 1 * mib
	// rootFree is the root file system's free space: containerd's unpacked images and snapshots,
	// etcd, the logs. The file system can be grown after the partition on a bigger volume.
	rootFree = 2048 * mib
	// stub is systemd's EFI stub (systemd-boot-efi) the unified kernel image is made from.
	stub = "/usr/lib/systemd/boot/efi/linuxx64.efi.stub"
	// Partition types: the EFI system partition, and the discoverable root of x86-64.
	espType  = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	rootType = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"
)

// partitions are the file system images, in disk order.
type partitions struct {
	esp, root         string
	espSize, rootSize int64
}

// filesystems makes the ESP with the unified kernel image and the ext4 root from the tree.
func (b *build) filesystems(ctx context.Context, t *tree) (partitions, error) {
	var p partitions
	uki := b.path("BOOTX64.EFI")
	if err := b.unifiedKernel(ctx, t, uki); err != nil {
		return p, err
	}
	fi, err := os.Stat(uki)
	if err != nil {
		return p, err
	}
	p.esp, p.espSize = b.path("esp.img"), roundUp(fi.Size()+16*mib, 64*mib)
	if err := b.esp(ctx, uki, p.esp, p.espSize); err != nil {
		return p, err
	}
	// ext4's metadata (inode tables, the journal) takes about a tenth more than the files.
	p.root, p.rootSize = b.path("root.img"), roundUp(t.size*11/10+b.rootFree, 64*mib)
	if err := b.ext4(ctx, t, p.root, p.rootSize); err != nil {
		return p, err
	}
	return p, nil
}

// cmdline is the kernel's command line: the root by its partition's GUID, both consoles (a
// cloud's serial log and a screen), no waiting for a keyboard.
func (b *build) cmdline() string {
	return "root=PARTUUID=" + b.ids.rootGUID + " rw console=tty0 console=ttyS0,115200n8 panic=10 systemd.show_status=error\n"
}

// unifiedKernel writes one EFI executable of systemd's stub with the kernel, the initrd, the
// command line and os-release in its sections (the layout systemd's ukify uses), which UEFI
// firmware boots from \EFI\BOOT\BOOTX64.EFI with no boot loader.
func (b *build) unifiedKernel(ctx context.Context, t *tree, out string) error {
	cmdline := b.path("cmdline")
	if err := os.WriteFile(cmdline, []byte(b.cmdline()), 0o644); err != nil {
		return err
	}
	osrel := t.host("/usr/lib/os-release")
	if err := run(ctx, nil, "objcopy",
		"--add-section", ".osrel="+osrel, "--change-section-vma", ".osrel=0x20000",
		"--add-section", ".cmdline="+cmdline, "--change-section-vma", ".cmdline=0x30000",
		"--add-section", ".linux="+t.kernel, "--change-section-vma", ".linux=0x2000000",
		"--add-section", ".initrd="+t.initrd, "--change-section-vma", ".initrd=0x3000000",
		stub, out); err != nil {
		return err
	}
	return stampPE(out, b.epoch.Unix())
}

// stampPE sets a PE executable's time stamp, which objcopy sets to the clock (binutils 2.40
// ignores SOURCE_DATE_EPOCH there), and its checksum after it.
func stampPE(path string, epoch int64) error {
	d, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if len(d) < 0x40 {
		return fmt.Errorf("%s: not a PE executable", path)
	}
	pe := int(binary.LittleEndian.Uint32(d[0x3c:]))
	sumAt := pe + 24 + 64 // the optional header's CheckSum
	if pe+4 > len(d) || string(d[pe:pe+4]) != "PE\x00\x00" || sumAt+4 > len(d) {
		return fmt.Errorf("%s: not a PE executable", path)
	}
	binary.LittleEndian.PutUint32(d[pe+8:], uint32(epoch))
	binary.LittleEndian.PutUint32(d[sumAt:], 0)
	// The PE checksum: the 16-bit ones' complement sum of the file, plus its length.
	var sum uint32
	for i := 0; i < len(d); i += 2 {
		w := uint32(d[i])
		if i+1 < len(d) {
			w |= uint32(d[i+1]) << 8
		}
		sum += w
		sum = sum&0xffff + sum>>16
	}
	binary.LittleEndian.PutUint32(d[sumAt:], sum+uint32(len(d)))
	return os.WriteFile(path, d, 0o644)
}

// esp makes the FAT EFI system partition holding uki as \EFI\BOOT\BOOTX64.EFI.
func (b *build) esp(ctx context.Context, uki, img string, size int64) error {
	if err := os.Chtimes(uki, b.epoch, b.epoch); err != nil {
		return err
	}
	env := b.env()
	if err := run(ctx, env, "mkfs.fat", "-C", "--invariant", "-i", b.ids.espVolumeID, "-n", "ESP", img, strconv.FormatInt(size/1024, 10)); err != nil {
		return err
	}
	if err := run(ctx, env, "mmd", "-i", img, "::/EFI", "::/EFI/BOOT"); err != nil {
		return err
	}
	return run(ctx, env, "mcopy", "-m", "-i", img, uki, "::/EFI/BOOT/BOOTX64.EFI")
}

// ext4 makes the root file system from the tree, with the derived UUID and hash seed and every
// time stamp at the epoch.
func (b *build) ext4(ctx context.Context, t *tree, img string, size int64) error {
	f, err := os.Create(img)
	if err != nil {
		return err
	}
	if err := errors.Join(f.Truncate(size), f.Close()); err != nil {
		return err
	}
	env := b.env()
	if err := run(ctx, env, "mke2fs", "-q", "-F", "-t", "ext4", "-b", "4096", "-L", "root",
		"-U", b.ids.rootUUID, "-E", "hash_seed="+b.ids.hashSeed+",root_owner=0:0,lazy_itable_init=0,nodiscard",
		"-d", t.dir, img); err != nil {
		return err
	}
	script := b.path("times.debugfs")
	if err := os.WriteFile(script, []byte(t.debugfsScript(b.epoch.Unix())), 0o644); err != nil {
		return err
	}
	return run(ctx, env, "debugfs", "-w", "-f", script, img)
}

// env fixes the time e2fsprogs and mtools write into their file systems.
func (b *build) env() []string {
	e := strconv.FormatInt(b.epoch.Unix(), 10)
	return append(os.Environ(), "E2FSPROGS_FAKE_TIME="+e, "SOURCE_DATE_EPOCH="+e, "MTOOLS_SKIP_CHECK=1")
}

// assemble writes the GPT and copies the partitions in, leaving holes where they are zero.
func (b *build) assemble(ctx context.Context, p partitions, out string) error {
	size := gptLead + p.espSize + p.rootSize + gptTrail
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	if err := errors.Join(f.Truncate(size), f.Close()); err != nil {
		return err
	}
	lead, espSectors, rootSectors := int64(gptLead/512), p.espSize/512, p.rootSize/512
	table := fmt.Sprintf(`label: gpt
label-id: %s
unit: sectors
first-lba: %d

start=%d, size=%d, type=%s, uuid=%s, name="ESP"
start=%d, size=%d, type=%s, uuid=%s, name="root"
`, b.ids.diskGUID, lead, lead, espSectors, espType, b.ids.espGUID, lead+espSectors, rootSectors, rootType, b.ids.rootGUID)
	if err := runInput(ctx, nil, table, "sfdisk", "--quiet", "--no-reread", "--no-tell-kernel", tmp); err != nil {
		return err
	}
	f, err = os.OpenFile(tmp, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	err = errors.Join(copySparse(f, p.esp, gptLead), copySparse(f, p.root, gptLead+p.espSize))
	if err := errors.Join(err, f.Close()); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// copySparse writes the file src into dst at off, skipping the blocks that are all zero (dst
// is a fresh sparse file: they stay holes).
func copySparse(dst *os.File, src string, off int64) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	buf := make([]byte, 64<<10)
	zero := make([]byte, 4096)
	for pos := int64(0); ; {
		n, err := io.ReadFull(in, buf)
		for i := 0; i < n; i += 4096 {
			blk := buf[i:min(i+4096, n)]
			if !bytes.Equal(blk, zero[:len(blk)]) {
				if _, werr := dst.WriteAt(blk, off+pos+int64(i)); werr != nil {
					return werr
				}
			}
		}
		pos += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// run runs a command with env (nil: herd's).
func run(ctx context.Context, env []string, name string, args ...string) error {
	return runInput(ctx, env, "", name, args...)
}

// runInput runs a command with stdin as its standard input.
func runInput(ctx context.Context, env []string, stdin, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env, cmd.Stdin = env, strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w\n%s", name, err, tail(string(out), 2000))
	}
	return nil
}

func roundUp(n, to int64) int64 { return (n + to - 1) / to * to }
