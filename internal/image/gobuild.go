// Building binaries with the go tool: app images' main packages and the embedded pause program,
// reproducibly, as static linux binaries.

package image

import (
	"bytes"
	"context"
	_ "embed" // the pause program's source
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"herd.dev/herd/internal/addons"
)

//go:embed pause/main.go.txt
var pauseSource []byte

// pauseGoMod is the go.mod of the temporary module the pause program is built in. Its go line is
// old on purpose: any installed toolchain builds it without fetching another.
const pauseGoMod = "module herd.dev/pause\n\ngo 1.20\n"

// goEnv is the environment of every go command herd runs: static linux binaries for this
// machine's architecture.
func goEnv(extra ...string) []string {
	env := append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	return append(env, extra...)
}

// checkMainPackage asks go list whether dir holds a main package.
func checkMainPackage(ctx context.Context, goTool, dir string) error {
	cmd := exec.CommandContext(ctx, goTool, "list", "-f", "{{.Name}}", ".")
	cmd.Dir = dir
	cmd.Env = goEnv()
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return errors.New(msg)
		}
		return err
	}
	if pkg := strings.TrimSpace(stdout.String()); pkg != "main" {
		return fmt.Errorf("it is package %s; an image's binary must be built from package main", pkg)
	}
	return nil
}

// goBuild builds the main package in dir into out, reproducibly: the same source and toolchain
// give the same bytes.
func goBuild(ctx context.Context, goTool, dir, out string, extraEnv []string) error {
	return goBuildPackage(ctx, goTool, dir, ".", out, extraEnv)
}

// goBuildPackage builds the main package pkg (an import path, or "." for dir's own) in the module
// of dir into out, as goBuild does.
func goBuildPackage(ctx context.Context, goTool, dir, pkg, out string, extraEnv []string) error {
	if err := os.MkdirAll(filepath.Dir(out), 0o700); err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = goEnv(extraEnv...)
	output, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if msg := strings.TrimSpace(string(output)); msg != "" {
			return errors.New(msg)
		}
		return err
	}
	return nil
}

// buildPause builds the embedded pause program and writes its image to images/pause.tar of the
// bundle.
func buildPause(ctx context.Context, goTool, scratch, bdir string) (ImageRecord, error) {
	bin, err := buildPauseBinary(ctx, goTool, scratch)
	if err != nil {
		return ImageRecord{}, err
	}
	img, err := binaryImage(bin, "pause", nil, filepath.Join(scratch, "layer-pause.tar"), "herd image build: pause")
	if err != nil {
		return ImageRecord{}, fmt.Errorf("packaging the pause image: %w", err)
	}
	const file = "images/pause.tar"
	rec, err := writeImageTar(PauseImage, img, filepath.Join(bdir, filepath.FromSlash(file)), file)
	if err != nil {
		return ImageRecord{}, fmt.Errorf("writing the pause image: %w", err)
	}
	return rec, nil
}

// buildPauseBinary writes the embedded pause program into a temporary module under scratch,
// builds it and returns the binary's path.
func buildPauseBinary(ctx context.Context, goTool, scratch string) (string, error) {
	src := filepath.Join(scratch, "pause-src")
	if err := os.MkdirAll(src, 0o700); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(pauseGoMod), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "main.go"), pauseSource, 0o600); err != nil {
		return "", err
	}
	bin := filepath.Join(scratch, "pause-bin", "pause")
	if err := goBuild(ctx, goTool, src, bin, []string{"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=mod"}); err != nil {
		return "", fmt.Errorf("building the pause image with %s failed:\n%w", goTool, err)
	}
	return bin, nil
}

// buildAddonImage builds an add-on's binary from its pinned, embedded source and writes its image
// to images/addon-BINARY.tar of the bundle.
func buildAddonImage(ctx context.Context, goTool string, a addons.Addon, scratch, bdir string) (ImageRecord, error) {
	files, err := a.SourceFiles()
	if err != nil {
		return ImageRecord{}, err
	}
	src := filepath.Join(scratch, "addon-"+a.Binary)
	if err := os.MkdirAll(src, 0o700); err != nil {
		return ImageRecord{}, err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o600); err != nil {
			return ImageRecord{}, err
		}
	}
	bin := filepath.Join(scratch, "addon-bin", a.Binary)
	// -mod=readonly: the embedded go.sum pins every module; a build that would change it fails.
	if err := goBuildPackage(ctx, goTool, src, a.BuildTarget(), bin, []string{"GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=readonly"}); err != nil {
		return ImageRecord{}, fmt.Errorf("%s: building %s %s from source with %s failed (is the Go module proxy reachable? set %s: false to leave the add-on out):\n%w", a.Field(), a.Binary, a.Version, goTool, a.Field(), err)
	}
	img, err := binaryImage(bin, a.Binary, nil, filepath.Join(scratch, "layer-addon-"+a.Binary+".tar"), "herd image build: "+a.Binary+" "+a.Version)
	if err != nil {
		return ImageRecord{}, fmt.Errorf("%s: packaging %s: %w", a.Field(), a.Image, err)
	}
	file := "images/addon-" + a.Binary + ".tar"
	rec, err := writeImageTar(a.Image, img, filepath.Join(bdir, filepath.FromSlash(file)), file)
	if err != nil {
		return ImageRecord{}, fmt.Errorf("%s: writing %s: %w", a.Field(), a.Image, err)
	}
	return rec, nil
}

// writeAddonManifest writes an add-on's manifests to its ManifestFile of the bundle.
func writeAddonManifest(a addons.Addon, bdir string) (FileRecord, error) {
	data, err := a.Manifest()
	if err != nil {
		return FileRecord{}, err
	}
	file := a.ManifestFile()
	dst := filepath.Join(bdir, filepath.FromSlash(file))
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return FileRecord{}, fmt.Errorf("image store: %w", err)
	}
	rec, err := writeFile(dst, data)
	if err != nil {
		return FileRecord{}, fmt.Errorf("%s: %w", a.Field(), err)
	}
	rec.File = file
	return rec, nil
}
