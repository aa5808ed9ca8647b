// render turns a NodeImage's Kustomize directory and Helm charts into plain manifests at build
// time, with the libraries `kubectl kustomize` and `helm template` use, so that the bundle holds
// only what an instance applies and stays the same bytes for the same inputs.

package image

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/release"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/kubebin"
)

// renderedFile is one manifest file made at build time.
type renderedFile struct {
	file      string // the path inside the bundle, e.g. "rendered/chart-web.yaml"
	data      []byte
	namespace string // where namespaced objects without a namespace go; "" is default
	field     string // the NodeImage field it came from, for errors
}

// renderKustomize builds the kustomization in dir as `kubectl kustomize dir` does (kustomize's
// default options: files only from inside dir's tree, no plugins).
func renderKustomize(dir string) (renderedFile, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return renderedFile{}, err
	}
	out, err := m.AsYaml()
	if err != nil {
		return renderedFile{}, err
	}
	if len(out) == 0 {
		return renderedFile{}, fmt.Errorf("the kustomization renders no object: add resources to its kustomization.yaml")
	}
	return renderedFile{file: "rendered/kustomize.yaml", data: out}, nil
}

// renderChart renders one chart as `helm template` does, against the Kubernetes version herd
// pins, with CRDs included. Hooks are left out, each named in a warning: a baked release is
// installed once by applying its manifests, so no hook would run at the moment it was written
// for.
func renderChart(c v1alpha1.Chart, chartPath string, valuesFiles []string) (renderedFile, []string, error) {
	ch, err := loader.Load(chartPath)
	if err != nil {
		return renderedFile{}, nil, fmt.Errorf("load the chart: %w", err)
	}
	opts := values.Options{ValueFiles: valuesFiles}
	vals, err := opts.MergeValues(getter.Providers{})
	if err != nil {
		return renderedFile{}, nil, fmt.Errorf("values files: %w", err)
	}
	if c.Values != nil {
		// CoalesceTables keeps the first map's keys over the second's, so spec values win.
		vals = chartutil.CoalesceTables(deepCopyValues(c.Values), vals)
	}
	kv, err := chartutil.ParseKubeVersion(kubebin.Version)
	if err != nil {
		return renderedFile{}, nil, err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun, inst.ClientOnly, inst.Replace, inst.IncludeCRDs = true, true, true, true
	inst.ReleaseName, inst.Namespace, inst.KubeVersion = c.Name, c.Namespace, kv
	rel, err := inst.Run(ch, vals)
	if err != nil {
		return renderedFile{}, nil, fmt.Errorf("render: %w", err)
	}
	var warnings []string
	for _, h := range rel.Hooks {
		if isTestHook(h) {
			continue
		}
		warnings = append(warnings, fmt.Sprintf("chart %s: hook %s (%s) is left out: a baked release is applied, never installed or upgraded, so hooks do not run", c.Name, h.Path, h.Kind))
	}
	out := []byte(rel.Manifest)
	if ns := c.Namespace; ns != "" && !builtinNamespace(ns) && !rendersNamespace(out, ns) {
		nsDoc := fmt.Sprintf("# The release's namespace (spec.charts[].namespace), as `helm install --create-namespace` makes it.\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: %s\n---\n", ns)
		out = append([]byte(nsDoc), bytes.TrimPrefix(out, []byte("---\n"))...)
	}
	if strings.TrimSpace(rel.Manifest) == "" {
		return renderedFile{}, warnings, fmt.Errorf("the chart renders no object with these values")
	}
	return renderedFile{file: "rendered/chart-" + c.Name + ".yaml", data: out, namespace: c.Namespace}, warnings, nil
}

func isTestHook(h *release.Hook) bool {
	for _, e := range h.Events {
		if e == release.HookTest {
			return true
		}
	}
	return false
}

// builtinNamespace says whether Kubernetes makes ns itself.
func builtinNamespace(ns string) bool {
	switch ns {
	case "default", "kube-system", "kube-public", "kube-node-lease":
		return true
	}
	return false
}

// deepCopyValues copies a values tree, so that merging never writes into the NodeImage.
func deepCopyValues(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		if sub, ok := v.(map[string]any); ok {
			v = deepCopyValues(sub)
		}
		out[k] = v
	}
	return out
}

// planRendered renders spec.kustomize and spec.charts, resolving their paths with resolve, and
// reports every problem with its field.
func planRendered(ni *v1alpha1.NodeImage, resolve func(string) string, fail func(string, ...any)) (files []renderedFile, warnings []string) {
	if k := ni.Spec.Kustomize; k != "" {
		dir := resolve(k)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			fail("spec.kustomize: %s is not a directory (looked for %s): give the directory holding the kustomization.yaml, relative to the NodeImage file", k, dir)
		} else if rf, err := renderKustomize(dir); err != nil {
			fail("spec.kustomize: %s: %v", k, err)
		} else {
			rf.field = "spec.kustomize"
			files = append(files, rf)
		}
	}
	for i, c := range ni.Spec.Charts {
		field := fmt.Sprintf("spec.charts[%d]", i)
		path := resolve(c.Chart)
		if _, err := os.Stat(path); err != nil {
			fail("%s.chart: %s is not there (looked for %s): give a chart directory or a packaged chart (.tgz), relative to the NodeImage file", field, c.Chart, path)
			continue
		}
		var vfs []string
		missing := false
		for k, v := range c.ValuesFiles {
			p := resolve(v)
			if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
				fail("%s.valuesFiles[%d]: %s is not a file (looked for %s): give a values file, relative to the NodeImage file", field, k, v, p)
				missing = true
			}
			vfs = append(vfs, p)
		}
		if missing {
			continue
		}
		rf, ws, err := renderChart(c, path, vfs)
		warnings = append(warnings, ws...)
		if err != nil {
			fail("%s: chart %s: %v", field, c.Chart, err)
			continue
		}
		rf.field = field
		files = append(files, rf)
	}
	return files, warnings
}

// rendersNamespace says whether one of the YAML documents in data is the Namespace ns.
func rendersNamespace(data []byte, ns string) bool {
	for _, doc := range v1alpha1.SplitDocuments(data) {
		var o struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if yaml.Unmarshal(doc, &o) == nil && o.Kind == "Namespace" && o.Metadata.Name == ns {
			return true
		}
	}
	return false
}
