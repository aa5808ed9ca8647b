package localtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// BuildHerd builds herd and herd-agent (the agent sits beside herd, where the local provider
// looks for it) into dir and returns the module's root.
func BuildHerd(t testing.TB, dir string) (root string) {
	t.Helper()
	root, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// Build is BuildHerd for callers that share one build between tests (a sync.Once), where a
// failure is each test's to report.
func Build(dir string) (root string, err error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("go env GOMOD: %q %v: not inside the herd module", mod, err)
	}
	root = filepath.Dir(mod)
	build := exec.Command("go", "build", "-o", dir+"/", "./cmd/herd", "./cmd/herd-agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/herd ./cmd/herd-agent: %v\n%s", err, out)
	}
	return root, nil
}
