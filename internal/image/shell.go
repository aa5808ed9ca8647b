// The shell image add-ons' helper pods run: Debian's busybox-static, the one statically linked
// shell and coreutils a node image can carry without pulling anything.

package image

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"herd.dev/herd/internal/addons"
)

// busyboxPath is where Debian's busybox-static package installs its binary.
const busyboxPath = "/bin/busybox"

// buildShellImage packages busyboxPath with a link in /bin for each of its applets (sh, mkdir,
// rm, ...), tagged addons.ShellImage, and writes it to images/addon-shell.tar of the bundle. field
// is the add-on that needs it, for errors.
func buildShellImage(ctx context.Context, field, scratch, bdir string) (ImageRecord, error) {
	fail := func(err error) (ImageRecord, error) {
		return ImageRecord{}, fmt.Errorf("%s: the shell image %s: %w", field, addons.ShellImage, err)
	}
	out, err := exec.CommandContext(ctx, busyboxPath, "--list").Output()
	if err != nil {
		return fail(fmt.Errorf("running %s --list: %w (install Debian's busybox-static: make deps, or set %s: false)", busyboxPath, err, field))
	}
	applets := strings.Fields(string(out))
	layerPath := filepath.Join(scratch, "layer-shell.tar")
	if err := writeShellLayer(busyboxPath, applets, layerPath); err != nil {
		return fail(err)
	}
	img, err := layerImage(layerPath, "herd image build: busybox-static", LayerConfig{Entrypoint: []string{"/bin/sh"}})
	if err != nil {
		return fail(err)
	}
	const file = "images/addon-shell.tar"
	rec, err := writeImageTar(addons.ShellImage, img, filepath.Join(bdir, filepath.FromSlash(file)), file)
	if err != nil {
		return fail(err)
	}
	return rec, nil
}

// writeShellLayer writes an uncompressed layer tar holding tmp/ (mode 1777), bin/busybox and a
// symbolic link bin/APPLET -> busybox for each applet, owned by root, time-stamped epoch, in a
// fixed order.
func writeShellLayer(binPath string, applets []string, layerPath string) error {
	bin, err := os.ReadFile(binPath)
	if err != nil {
		return err
	}
	sort.Strings(applets)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdrs := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "bin/", Mode: 0o755, ModTime: epoch},
		{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bin)), ModTime: epoch},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
	}
	if _, err := tw.Write(bin); err != nil {
		return err
	}
	for _, a := range applets {
		// --list prints names only; a name with a slash or "busybox" itself is not an applet link.
		if a == "busybox" || strings.Contains(a, "/") {
			continue
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777, ModTime: epoch}); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777, ModTime: epoch}); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	f, err := os.Create(layerPath)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(f, &buf); err != nil {
		return err
	}
	return f.Close()
}
