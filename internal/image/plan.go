// plan checks a NodeImage's inputs before anything is built: the Kubernetes version, the
// manifests (each document parses; the images they name are baked in), the Kustomize directory
// and Helm charts (rendered here), the app images' sources and the go tool, reporting every
// problem at once.

package image

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"sigs.k8s.io/yaml"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/kubebin"
)

// buildPlan is what plan found: resolved inputs and warnings.
type buildPlan struct {
	goTool    string
	manifests []string       // absolute paths, sorted by name
	rendered  []renderedFile // spec.kustomize, then spec.charts in order
	mainDirs  map[int]string // spec.images index -> absolute package directory
	tarPaths  map[int]string // spec.images index -> absolute tar path
	warnings  []string
}

// plan checks every input before anything is built and reports every problem at once, each
// naming its field and the fix.
func plan(ctx context.Context, ni *v1alpha1.NodeImage, base string) (*buildPlan, error) {
	p := &buildPlan{mainDirs: map[int]string{}, tarPaths: map[int]string{}}
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	resolve := func(rel string) string {
		if filepath.IsAbs(rel) {
			return filepath.Clean(rel)
		}
		return filepath.Join(base, rel)
	}

	k := ni.Spec.Kubernetes
	if k.Distribution == "upstream" && k.Version != kubebin.Version {
		fail("spec.kubernetes.version: the upstream distribution runs the Kubernetes herd pins, %s (got %s): remove the field or set it to %s", kubebin.Version, k.Version, kubebin.Version)
	}

	var uses []imageUse
	if ni.Spec.Manifests != "" { // optional when spec.kustomize or spec.charts is set
		p.manifests, uses = planManifests(ni.Spec.Manifests, resolve(ni.Spec.Manifests), fail)
	}
	p.rendered, p.warnings = planRendered(ni, resolve, fail)
	for _, r := range p.rendered {
		u, err := checkManifest(r.file, r.data)
		if err != nil {
			fail("%s: the rendered manifests: %v", r.field, err)
		}
		uses = append(uses, inField(r.field, u)...)
	}

	// The pause image is always built, so the Go toolchain is always needed.
	goTool, err := exec.LookPath("go")
	if err != nil {
		fail("herd image build needs the Go toolchain to build the pause image and spec.images[].main, and `go` is not on PATH: install Go from https://go.dev/dl/ and put its bin directory on PATH")
	}
	p.goTool = goTool
	for i, im := range ni.Spec.Images {
		field := fmt.Sprintf("spec.images[%d]", i)
		if _, err := name.NewTag(im.Name); err != nil {
			fail("%s.name: %q is not an image reference such as \"hello:v1\": %v", field, im.Name, err)
		} else if sameImage(im.Name, PauseImage) {
			fail("%s.name: %s is the pause image herd builds into every bundle: give the image another name", field, im.Name)
		}
		switch {
		case im.Main != "":
			d := resolve(im.Main)
			if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
				fail("%s.main: %s is not a directory (looked for %s): give the directory of a Go main package, relative to the NodeImage file", field, im.Main, d)
				continue
			}
			if goTool != "" {
				if err := checkMainPackage(ctx, goTool, d); err != nil {
					fail("%s.main: %s is not a Go main package: %v", field, im.Main, err)
					continue
				}
			}
			p.mainDirs[i] = d
		case im.Tar != "":
			t := resolve(im.Tar)
			if fi, err := os.Stat(t); err != nil || !fi.Mode().IsRegular() {
				fail("%s.tar: %s is not a file (looked for %s): give an image tar (docker save, or an OCI layout tar), relative to the NodeImage file", field, im.Tar, t)
				continue
			}
			if err := checkImageTarShape(t); err != nil {
				fail("%s.tar: %s: %v", field, im.Tar, err)
				continue
			}
			p.tarPaths[i] = t
		}
	}
	unbaked, warnings := checkImages(uses, ni.Spec.Images)
	for _, e := range unbaked {
		fail("%s", e)
	}
	p.warnings = append(p.warnings, warnings...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return p, nil
}

// planManifests checks the spec.manifests directory (as written, and resolved to dir): its files,
// sorted, and the images their containers use.
func planManifests(written, dir string, fail func(string, ...any)) (files []string, uses []imageUse) {
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		fail("spec.manifests: %s is not a directory (looked for %s): create it with the Kubernetes YAML to apply at boot, or fix the path (relative to the NodeImage file)", written, dir)
		return nil, nil
	}
	files, err := manifestFiles(dir)
	if err != nil {
		fail("spec.manifests: %v", err)
	} else if len(files) == 0 {
		fail("spec.manifests: %s holds no .yaml, .yml or .json file: add the Kubernetes manifests to apply at boot", written)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err == nil {
			var u []imageUse
			u, err = checkManifest(filepath.Base(f), data)
			uses = append(uses, inField("spec.manifests", u)...)
		}
		if err != nil {
			fail("spec.manifests: %v", err)
		}
	}
	return files, uses
}

// manifestFiles lists the .yaml, .yml and .json files of dir (not its subdirectories), sorted.
func manifestFiles(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range entries {
		switch strings.ToLower(filepath.Ext(e.Name())) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		p := filepath.Join(dir, e.Name())
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

// imageUse is a container image a manifest names.
type imageUse struct {
	where      string // "deployment.yaml document 1 (Deployment hello)"
	image      string
	pullPolicy string
}

// checkManifest checks that every document of a manifest file (base is its name) parses and has
// apiVersion and kind, and returns the container images it names.
func checkManifest(base string, data []byte) ([]imageUse, error) {
	docs := [][]byte{data}
	if !strings.EqualFold(filepath.Ext(base), ".json") {
		docs = v1alpha1.SplitDocuments(data)
	}
	var uses []imageUse
	for i, doc := range docs {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("%s: document %d: %v", base, i+1, err)
		}
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil || obj == nil {
			return nil, fmt.Errorf("%s: document %d: not a Kubernetes object (a mapping with apiVersion and kind)", base, i+1)
		}
		kind, _ := obj["kind"].(string)
		if av, _ := obj["apiVersion"].(string); av == "" || kind == "" {
			return nil, fmt.Errorf("%s: document %d: apiVersion and kind are required in every Kubernetes object", base, i+1)
		}
		objName, _ := nested(obj, "metadata", "name").(string)
		where := fmt.Sprintf("%s: %s %s", base, kind, objName)
		if src := helmSource(doc); src != "" {
			where += " (template " + src + ")"
		}
		walkContainers(obj, func(c map[string]any) {
			img, _ := c["image"].(string)
			pp, _ := c["imagePullPolicy"].(string)
			uses = append(uses, imageUse{where: where, image: img, pullPolicy: pp})
		})
	}
	return uses, nil
}

// inField prefixes where each use was found with the NodeImage field it came from.
func inField(field string, uses []imageUse) []imageUse {
	for i := range uses {
		uses[i].where = field + ": " + uses[i].where
	}
	return uses
}

// helmSource is the template a document rendered by Helm came from: Helm opens each with a
// "# Source: chart/templates/file.yaml" comment.
func helmSource(doc []byte) string {
	for _, line := range strings.Split(string(doc), "\n") {
		line = strings.TrimSpace(line)
		if src, ok := strings.CutPrefix(line, "# Source: "); ok {
			return src
		}
		if line != "" && !strings.HasPrefix(line, "#") {
			return ""
		}
	}
	return ""
}

func nested(m map[string]any, keys ...string) any {
	var v any = m
	for _, k := range keys {
		mm, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = mm[k]
	}
	return v
}

// walkContainers calls fn for every container (in containers, initContainers or
// ephemeralContainers lists) anywhere in a decoded object.
func walkContainers(v any, fn func(map[string]any)) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			c := t[k]
			if k == "containers" || k == "initContainers" || k == "ephemeralContainers" {
				if list, ok := c.([]any); ok {
					for _, e := range list {
						if m, ok := e.(map[string]any); ok {
							if _, has := m["image"]; has {
								fn(m)
							}
						}
					}
					continue
				}
			}
			walkContainers(c, fn)
		}
	case []any:
		for _, e := range t {
			walkContainers(e, fn)
		}
	}
}

// checkImages finds containers whose image an instance cannot get: instances pull nothing, so
// every image must be baked in (an error: such a pod would never start) and must not be pulled (a
// warning: the pull policy may be what the user means to change).
func checkImages(uses []imageUse, images []v1alpha1.AppImage) (unbaked, warnings []string) {
	seen := map[string]bool{}
	for _, u := range uses {
		baked := false
		for _, im := range images {
			if sameImage(u.image, im.Name) {
				baked = true
			}
		}
		if !baked {
			e := fmt.Sprintf("%s uses image %q, which is not baked in: instances pull no images, so its pods would never start; add it to spec.images", u.where, u.image)
			if !seen[e] {
				seen[e] = true
				unbaked = append(unbaked, e)
			}
			continue
		}
		var w string
		switch {
		case u.pullPolicy == "Always":
			w = fmt.Sprintf("%s pulls image %q (imagePullPolicy: Always): instances pull no images; set imagePullPolicy: Never", u.where, u.image)
		case u.pullPolicy == "" && pullsByDefault(u.image):
			w = fmt.Sprintf("%s: image %q has no tag or the tag latest, which Kubernetes pulls by default: set imagePullPolicy: Never", u.where, u.image)
		}
		if w != "" && !seen[w] {
			seen[w] = true
			warnings = append(warnings, w)
		}
	}
	return unbaked, warnings
}

// sameImage says whether two references name the same image once normalized
// ("hello:v1" and "docker.io/library/hello:v1" do).
func sameImage(a, b string) bool {
	if a == b {
		return true
	}
	ra, err := name.ParseReference(a)
	if err != nil {
		return false
	}
	rb, err := name.ParseReference(b)
	if err != nil {
		return false
	}
	return ra.Name() == rb.Name()
}

// pullsByDefault says whether Kubernetes' default pull policy for ref is Always (no tag, or the
// tag latest, and no digest).
func pullsByDefault(ref string) bool {
	if strings.Contains(ref, "@") {
		return false
	}
	t, err := name.NewTag(ref)
	if err != nil {
		return false
	}
	return t.TagStr() == "latest"
}
