// Tests of the checks Build makes before building: bad inputs are refused naming the field and
// the fix, and images instances would pull are warned about (TestUnbakedImageStopsTheBuild has
// those they cannot get at all).

package image

import (
	"context"
	"strings"
	"testing"
)

func TestBadMainPackageLeavesNothing(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"not package main", map[string]string{"app/main.go": "package app\n\nfunc F() {}\n"},
			[]string{"spec.images[0].main: ./app is not a Go main package", "package app"}},
		{"does not compile", map[string]string{"app/main.go": "package main\n\nfunc main() { undefinedThing() }\n"},
			[]string{"spec.images[0].main: go build ./app failed", "undefined: undefinedThing"}},
		{"no such directory", map[string]string{"app/main.go": ""},
			[]string{"spec.images[0].main: ./app is not a directory"}},
		{"no go files", map[string]string{"app/main.go": "", "app/x.txt": "x"},
			[]string{"spec.images[0].main: ./app is not a Go main package"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { buildFails(t, tt.files, tt.want) })
	}
}

func TestInvalidInputsNameTheField(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  []string
	}{
		{"missing manifests dir", map[string]string{"manifests/deployment.yaml": "", "manifests/service.yaml": "", "manifests/README.md": ""},
			[]string{"spec.manifests: manifests is not a directory"}},
		{"no manifest files", map[string]string{"manifests/deployment.yaml": "", "manifests/service.yaml": ""},
			[]string{"spec.manifests: manifests holds no .yaml, .yml or .json file"}},
		{"manifest without kind", map[string]string{"manifests/service.yaml": "apiVersion: v1\nmetadata: {name: x}\n"},
			[]string{"spec.manifests: service.yaml: document 1: apiVersion and kind are required"}},
		{"broken yaml", map[string]string{"manifests/service.yaml": fixtureService + "---\nkind: [\n"},
			[]string{"spec.manifests: service.yaml: document 2"}},
		{"wrong upstream version", map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "spec:\n", "spec:\n  kubernetes: {version: v1.20.0}\n", 1)},
			[]string{"spec.kubernetes.version: the upstream distribution runs", "v1.20.0"}},
		{"pause name taken", map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, `"hello:v1"`, `"registry.k8s.io/pause:3.10"`, 1)},
			[]string{"spec.images[0].name: registry.k8s.io/pause:3.10 is the pause image"}},
		{"missing tar", map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "main: ./app", "tar: nope.tar", 1)},
			[]string{"spec.images[0].tar: nope.tar is not a file"}},
		{"not a tar", map[string]string{"junk.tar": "this is not a tar file, just text\n", "image.yaml": strings.Replace(fixtureImageYAML, "main: ./app", "tar: junk.tar", 1)},
			[]string{"spec.images[0].tar: junk.tar:"}},
		{"a fleet", map[string]string{"image.yaml": "apiVersion: herd.dev/v1alpha1\nkind: Fleet\nmetadata: {name: f}\nspec: {image: hello}\n"},
			[]string{"document 1 is a Fleet: apply it with `herd apply -f"}},
		{"invalid spec", map[string]string{"image.yaml": strings.Replace(fixtureImageYAML, "main: ./app", "", 1)},
			[]string{"is invalid, nothing was built", "spec.images[0]"}},
		{"several problems at once", map[string]string{
			"manifests/deployment.yaml": "", "manifests/service.yaml": "", "manifests/README.md": "",
			"app/main.go": "package app\n",
		}, []string{"spec.manifests:", "spec.images[0].main:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { buildFails(t, tt.files, tt.want) })
	}
}

func TestWarnsAboutImagesInstancesCannotGet(t *testing.T) {
	s := newStore(t)
	dep := fixtureDeployment + `---
apiVersion: v1
kind: Pod
metadata: {name: side}
spec:
  initContainers: [{name: i, image: "hello:v1", imagePullPolicy: Always}]
  containers: [{name: c, image: "docker.io/library/hello:v1"}]
`
	_, lines := build(t, fixture(t, map[string]string{"manifests/deployment.yaml": dep}), s)
	joined := strings.Join(lines, "\n")
	for _, w := range []string{
		`warning: spec.manifests: deployment.yaml: Pod side pulls image "hello:v1" (imagePullPolicy: Always)`,
	} {
		if !strings.Contains(joined, w) {
			t.Errorf("progress lacks %q:\n%s", w, joined)
		}
	}
	if strings.Contains(joined, "Deployment hello") {
		t.Errorf("warned about a container that is fine:\n%s", joined)
	}
}

func TestMissingGoToolchainNamesTheFix(t *testing.T) {
	file := fixture(t, nil)
	t.Setenv("PATH", t.TempDir())
	s := newStore(t)
	_, err := Build(context.Background(), file, s, nil)
	if err == nil || !strings.Contains(err.Error(), "`go` is not on PATH: install Go from https://go.dev/dl/") {
		t.Fatalf("Build without go on PATH: %v", err)
	}
	assertEmpty(t, s)
}
