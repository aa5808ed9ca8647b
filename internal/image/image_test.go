// The fixture NodeImage and the helpers the package's tests share; the tests live beside the
// files they test (build_test.go, plan_test.go, oci_test.go, store_test.go, gobuild_test.go).

package image

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const fixtureImageYAML = `apiVersion: herd.dev/v1alpha1
kind: NodeImage
metadata:
  name: hello
spec:
  manifests: manifests
  addons: {dns: false, storage: false, metrics: false} # TestIntegrationAddons builds them: the rest need no add-on build
  images:
  - name: "hello:v1"
    main: ./app
    env: {GREETING: hi}
`

const fixtureMain = `package main

import "fmt"

func main() { fmt.Println("hello") }
`

const fixtureDeployment = `apiVersion: apps/v1
kind: Deployment
metadata: {name: hello}
spec:
  selector: {matchLabels: {app: hello}}
  template:
    metadata: {labels: {app: hello}}
    spec:
      containers:
      - {name: hello, image: "hello:v1", imagePullPolicy: Never}
`

const fixtureService = `apiVersion: v1
kind: Service
metadata: {name: hello}
spec:
  type: NodePort
  selector: {app: hello}
  ports: [{port: 8080, nodePort: 30080}]
`

// fixture writes a NodeImage project (its own Go module) into a new directory and returns the
// NodeImage file's path. files overrides or adds files; an empty value deletes one.
func fixture(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	all := map[string]string{
		"image.yaml":                fixtureImageYAML,
		"go.mod":                    "module example.com/hello\n\ngo 1.20\n",
		"app/main.go":               fixtureMain,
		"manifests/deployment.yaml": fixtureDeployment,
		"manifests/service.yaml":    fixtureService,
		"manifests/README.md":       "not a manifest: ignored\n",
	}
	for k, v := range files {
		all[k] = v
	}
	for p, content := range all {
		if content == "" {
			continue
		}
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "image.yaml")
}

func newStore(t *testing.T) *Store {
	t.Helper()
	return NewStore(filepath.Join(t.TempDir(), "images"))
}

func build(t *testing.T, file string, s *Store) (Bundle, []string) {
	t.Helper()
	var lines []string
	b, err := Build(context.Background(), file, s, func(l string) { lines = append(lines, l) })
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return b, lines
}

// assertEmpty fails unless the store holds no bundle and no build leftovers.
func assertEmpty(t *testing.T, s *Store) {
	t.Helper()
	bs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 0 {
		t.Errorf("store holds %d bundles, want none", len(bs))
	}
	entries, _ := os.ReadDir(s.tmpDir())
	if len(entries) != 0 {
		t.Errorf("store tmp/ holds %d entries (%s...), want none", len(entries), entries[0].Name())
	}
	names, _ := os.ReadDir(s.namesDir())
	if len(names) != 0 {
		t.Errorf("store names/ holds %d entries, want none", len(names))
	}
}

// buildFails builds the fixture with files changed and checks that the build fails with an error
// holding every string of want and leaves nothing in the store.
func buildFails(t *testing.T, files map[string]string, want []string) {
	t.Helper()
	s := newStore(t)
	_, err := Build(context.Background(), fixture(t, files), s, nil)
	if err == nil {
		t.Fatal("Build succeeded")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	assertEmpty(t, s)
}
