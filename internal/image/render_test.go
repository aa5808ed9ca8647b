// Tests of the Kustomize and Helm inputs: what they render into the bundle, which values win,
// and that an image they use but the bundle lacks stops the build naming both.

package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
)

// inputsImageYAML uses only a kustomization and a chart: spec.manifests is optional with them.
const inputsImageYAML = `apiVersion: herd.dev/v1alpha1
kind: NodeImage
metadata: {name: shop}
spec:
  kustomize: overlay
  charts:
  - name: web
    chart: chart
    namespace: front
    valuesFiles: [web-values.yaml]
    values: {revision: inline}
  addons: {dns: false, storage: false, metrics: false}
  images:
  - {name: "hello:v1", main: ./app}
`

// inputsFiles are a base with an overlay and a chart with a values file, a hook and a test hook.
var inputsFiles = map[string]string{
	"image.yaml":                fixtureImageYAML, // replaced below
	"manifests/deployment.yaml": "",
	"manifests/service.yaml":    "",
	"manifests/README.md":       "",
	"base/kustomization.yaml":   "resources: [deployment.yaml]\n",
	"base/deployment.yaml":      fixtureDeployment,
	"overlay/kustomization.yaml": `namespace: shop
namePrefix: prod-
resources: [../base]
patches:
- patch: |-
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: hello}
    spec: {replicas: 3}
`,
	"chart/Chart.yaml":  "apiVersion: v2\nname: greeter\nversion: 0.1.0\n",
	"chart/values.yaml": "image: hello:v1\nrevision: chart-default\nreplicas: 1\n",
	"chart/templates/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: {{ .Release.Name }}-greeter}
spec:
  replicas: {{ .Values.replicas }}
  selector: {matchLabels: {app: greeter}}
  template:
    metadata: {labels: {app: greeter}}
    spec:
      containers:
      - name: greeter
        image: {{ .Values.image | quote }}
        imagePullPolicy: Never
        env: [{name: REVISION, value: {{ .Values.revision | quote }}}, {name: NS, value: {{ .Release.Namespace }}}]
`,
	"chart/templates/migrate.yaml": `apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations: {"helm.sh/hook": pre-install}
spec:
  template:
    spec:
      restartPolicy: Never
      containers: [{name: m, image: "migrator:v1"}]
`,
	"chart/templates/test.yaml": `apiVersion: v1
kind: Pod
metadata:
  name: check
  annotations: {"helm.sh/hook": test}
spec:
  containers: [{name: c, image: busybox}]
`,
	"web-values.yaml": "revision: from-file\nreplicas: 2\n",
}

func inputsFixture(t *testing.T, changes map[string]string) string {
	t.Helper()
	files := map[string]string{}
	for k, v := range inputsFiles {
		files[k] = v
	}
	files["image.yaml"] = inputsImageYAML
	for k, v := range changes {
		files[k] = v
	}
	return fixture(t, files)
}

func readBundleFile(t *testing.T, b Bundle, file string) string {
	t.Helper()
	data, err := os.ReadFile(b.Path(file))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestKustomizeAndChartsRenderIntoTheBundle(t *testing.T) {
	s := newStore(t)
	b, lines := build(t, inputsFixture(t, nil), s)

	var files []string
	for _, m := range b.Config.Manifests {
		files = append(files, m.File+" ns="+m.Namespace)
	}
	if got, want := strings.Join(files, ", "), "rendered/kustomize.yaml ns=, rendered/chart-web.yaml ns=front"; got != want {
		t.Fatalf("bundle manifests = %s, want %s", got, want)
	}

	k := readBundleFile(t, b, "rendered/kustomize.yaml")
	for _, want := range []string{"name: prod-hello", "namespace: shop", "replicas: 3"} {
		if !strings.Contains(k, want) {
			t.Errorf("rendered kustomization lacks %q:\n%s", want, k)
		}
	}

	c := readBundleFile(t, b, "rendered/chart-web.yaml")
	for _, want := range []string{
		"kind: Namespace\nmetadata:\n  name: front\n", // the release namespace is made at boot
		"name: web-greeter",
		"replicas: 2",             // the values file over values.yaml
		`value: "inline"`,         // spec values over the values file
		"name: NS, value: front}", // .Release.Namespace
	} {
		if !strings.Contains(c, want) {
			t.Errorf("rendered chart lacks %q:\n%s", want, c)
		}
	}
	for _, absent := range []string{"migrate", "busybox", "from-file"} {
		if strings.Contains(c, absent) {
			t.Errorf("rendered chart holds %q, which it must not:\n%s", absent, c)
		}
	}
	joined := strings.Join(lines, "\n")
	if !strings.Contains(joined, "warning: chart web: hook greeter/templates/migrate.yaml (Job) is left out") {
		t.Errorf("no warning about the left-out install hook:\n%s", joined)
	}
	if strings.Contains(joined, "templates/test.yaml") {
		t.Errorf("warned about a test hook, which nobody runs on an instance anyway:\n%s", joined)
	}

	// The same inputs give the same bundle: rendering is part of the digest's promise.
	again, _ := build(t, inputsFixture(t, nil), s)
	if again.Digest != b.Digest {
		t.Errorf("second build of the same inputs: %s, first %s", again.Digest, b.Digest)
	}
}

func TestPackagedChartRendersLikeItsDirectory(t *testing.T) {
	file := inputsFixture(t, nil)
	dir := filepath.Dir(file)
	ch, err := loader.Load(filepath.Join(dir, "chart"))
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := chartutil.Save(ch, dir)
	if err != nil {
		t.Fatal(err)
	}
	fromDir, _ := build(t, file, newStore(t))
	img := strings.Replace(inputsImageYAML, "chart: chart", "chart: "+filepath.Base(tgz), 1)
	if err := os.WriteFile(file, []byte(img), 0o644); err != nil {
		t.Fatal(err)
	}
	fromTgz, _ := build(t, file, newStore(t))
	if a, b := readBundleFile(t, fromDir, "rendered/chart-web.yaml"), readBundleFile(t, fromTgz, "rendered/chart-web.yaml"); a != b {
		t.Errorf("%s renders\n%s\nits directory renders\n%s", filepath.Base(tgz), b, a)
	}
}

func TestUnbakedImageStopsTheBuild(t *testing.T) {
	tests := []struct {
		name    string
		changes map[string]string
		want    string
	}{
		{"chart value", map[string]string{"web-values.yaml": "image: redis:7\n"},
			`spec.charts[0]: rendered/chart-web.yaml: Deployment web-greeter (template greeter/templates/deployment.yaml) uses image "redis:7", which is not baked in`},
		{"kustomize image override", map[string]string{"overlay/kustomization.yaml": "resources: [../base]\nimages: [{name: hello, newName: nginx, newTag: \"1.27\"}]\n"},
			`spec.kustomize: rendered/kustomize.yaml: Deployment hello uses image "nginx:1.27", which is not baked in`},
		{"plain manifest", map[string]string{"image.yaml": strings.Replace(inputsImageYAML, "spec:\n", "spec:\n  manifests: manifests\n", 1),
			"manifests/pod.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: side}\nspec:\n  containers: [{name: c, image: nginx}]\n"},
			`spec.manifests: pod.yaml: Pod side uses image "nginx", which is not baked in`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			_, err := Build(t.Context(), inputsFixture(t, tt.changes), s, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Build: %v\nwant an error holding %s", err, tt.want)
			}
			assertEmpty(t, s)
		})
	}
}

func TestBadInputsNameTheirField(t *testing.T) {
	tests := []struct {
		name    string
		changes map[string]string
		want    []string
	}{
		{"no kustomize dir", map[string]string{"image.yaml": strings.Replace(inputsImageYAML, "kustomize: overlay", "kustomize: nope", 1)},
			[]string{"spec.kustomize: nope is not a directory"}},
		{"kustomization names a missing file", map[string]string{"overlay/kustomization.yaml": "resources: [../base, gone.yaml]\n"},
			[]string{"spec.kustomize: overlay:", "gone.yaml"}},
		{"no chart", map[string]string{"image.yaml": strings.Replace(inputsImageYAML, "chart: chart", "chart: charts/none", 1)},
			[]string{"spec.charts[0].chart: charts/none is not there"}},
		{"no values file", map[string]string{"web-values.yaml": ""},
			[]string{"spec.charts[0].valuesFiles[0]: web-values.yaml is not a file"}},
		{"template error", map[string]string{"chart/templates/broken.yaml": "kind: {{ .Values.nope.deeper }}\n"},
			[]string{"spec.charts[0]: chart chart: render:", "nil pointer evaluating interface {}.deeper"}},
		{"kustomize and chart at once", map[string]string{"overlay/kustomization.yaml": "resources: [missing]\n", "chart/Chart.yaml": "name: greeter\n"},
			[]string{"spec.kustomize:", "spec.charts[0]: chart chart: load the chart:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			_, err := Build(t.Context(), inputsFixture(t, tt.changes), s, nil)
			if err == nil {
				t.Fatal("Build succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			assertEmpty(t, s)
		})
	}
}
