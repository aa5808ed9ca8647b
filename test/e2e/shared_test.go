package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"herd.dev/herd/internal/provider/local/localtest"
)

// Building herd and the hello node image takes from half a minute to minutes on a busy 2-core
// machine, the same build for every test. The test binary builds each once, on first need, and
// gives every test its own copy: a test writes only its own files. A failed build fails every
// test that needs it, each with the build's error.

// shared is the test binary's one build directory: herd and herd-agent, and d/, a data directory
// holding the hello image. TestMain removes it.
var shared struct {
	dir  string
	herd struct {
		once sync.Once
		root string // module root
		err  error
	}
	hello struct {
		once sync.Once
		err  error
	}
}

func TestMain(m *testing.M) {
	if runFlood() {
		return
	}
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// sharedHerd builds herd and herd-agent once into shared.dir and returns the module root.
func sharedHerd() (root string, err error) {
	shared.herd.once.Do(func() {
		shared.dir, shared.herd.err = os.MkdirTemp("", "hs-")
		if shared.herd.err == nil {
			shared.herd.root, shared.herd.err = localtest.Build(shared.dir)
		}
	})
	return shared.herd.root, shared.herd.err
}

// installHerd hard-links the shared herd and herd-agent into e.dir: the binaries are only ever
// executed, and a link keeps the processes' executables under the test's own directory, where its
// leftover check looks for them.
func (e *env) installHerd() {
	e.t.Helper()
	root, err := sharedHerd()
	if err != nil {
		e.t.Fatal(err)
	}
	e.root = root
	for _, name := range []string{"herd", "herd-agent"} {
		if err := os.Link(filepath.Join(shared.dir, name), filepath.Join(e.dir, name)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// withHello gives e's data directory a copy of the image store holding the node image of
// examples/hello, built once per test binary. A full copy, not links: bundles are tens of
// megabytes, and no test can then change another's through a file they share.
func withHello(e *env) {
	e.t.Helper()
	shared.hello.once.Do(func() {
		data := filepath.Join(shared.dir, "d")
		cmd := exec.Command(filepath.Join(shared.dir, "herd"), "image", "build", "-f",
			filepath.Join(e.root, "examples", "hello", "image.yaml"), "--data-dir", data)
		cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(shared.dir, "config"))
		if out, err := cmd.CombinedOutput(); err != nil {
			shared.hello.err = fmt.Errorf("herd image build examples/hello: %v\n%s", err, tail(string(out), 30))
		}
	})
	if shared.hello.err != nil {
		e.t.Fatal(shared.hello.err)
	}
	if err := os.MkdirAll(e.data, 0o700); err != nil {
		e.t.Fatal(err)
	}
	cp := exec.Command("cp", "-a", filepath.Join(shared.dir, "d", "images"), e.data+"/")
	if out, err := cp.CombinedOutput(); err != nil {
		e.t.Fatalf("copy the hello image store: %v\n%s", err, out)
	}
}

// building returns a step of newEnv that builds the node image in file (a path from the module
// root) into e's data directory.
func building(file string) func(*env) {
	return func(e *env) {
		e.t.Helper()
		if out, err := e.herd("image", "build", "-f", filepath.Join(e.root, file), "--data-dir", e.data); err != nil {
			e.t.Fatalf("herd image build %s: %v\n%s", file, err, tail(out, 30))
		}
	}
}

// buildingVariant returns a step of newEnv that builds the hello variant buildVariant describes.
func buildingVariant(name, key, value string) func(*env) {
	return func(e *env) { e.buildVariant(name, key, value) }
}
