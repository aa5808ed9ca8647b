package agent

import (
	"errors"
	"net"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestDecodeManifests(t *testing.T) {
	files := []manifestFile{
		{name: "manifests/app.yaml", data: []byte(`# leading comment
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec: {replicas: 1}
---
---
# only a comment
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
`)},
		{name: "manifests/list.json", data: []byte(`{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}]}`)},
	}
	objs, err := decodeManifests(files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range objs {
		got = append(got, o.describe())
	}
	want := []string{
		"Deployment web (manifests/app.yaml, document 1)",
		"Service shop/web (manifests/app.yaml, document 3)",
		"ConfigMap a (manifests/list.json, document 1)",
		"Namespace shop (manifests/list.json, document 1)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("decoded:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	if order := kinds(applyOrder(objs)); order != "Namespace,Deployment,Service,ConfigMap" {
		t.Errorf("apply order = %v", order)
	}
}

// kinds lists the objects' kinds, comma-separated.
func kinds(objs []object) string {
	var out []string
	for _, o := range objs {
		out = append(out, o.obj.GetKind())
	}
	return strings.Join(out, ",")
}

func TestDecodeManifestsCarriesTheFileNamespace(t *testing.T) {
	objs, err := decodeManifests([]manifestFile{{name: "rendered/chart-web.yaml", namespace: "front", data: []byte(
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b, namespace: other}\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 2 || objs[0].namespace != "front" || objs[1].namespace != "front" {
		t.Fatalf("objects %+v: want both to carry the file's namespace front", objs)
	}
	// An object's own namespace still wins: tryApply only fills in a missing one.
	if objs[1].obj.GetNamespace() != "other" {
		t.Errorf("b's namespace = %q, want other", objs[1].obj.GetNamespace())
	}
}

func TestApplyOrderPutsCRDsBeforeTheirObjects(t *testing.T) {
	objs, err := decodeManifests([]manifestFile{{name: "m.yaml", data: []byte(`apiVersion: example.com/v1
kind: Widget
metadata: {name: w}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns1}
`)}})
	if err != nil {
		t.Fatal(err)
	}
	if order := kinds(applyOrder(objs)); order != "Namespace,CustomResourceDefinition,Widget" {
		t.Errorf("apply order = %v", order)
	}
}

func TestDecodeManifestsErrorsNameTheDocument(t *testing.T) {
	tests := []struct {
		name, data, want string
	}{
		{"no kind", "apiVersion: v1\nmetadata: {name: x}\n", "m.yaml: document 1: kind is missing"},
		{"no apiVersion", "kind: Pod\nmetadata: {name: x}\n", "m.yaml: document 1: apiVersion is missing"},
		{"no name", "---\napiVersion: v1\nkind: ConfigMap\n", "m.yaml: document 1: ConfigMap: metadata.name is missing"},
		{"generateName", "apiVersion: v1\nkind: Pod\nmetadata: {generateName: x-}\n", "metadata.generateName cannot be applied"},
		{"bad yaml in second doc", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\nkind: [\n", "m.yaml: document 2"},
		{"bad list item", `{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "metadata": {"name": "a"}}]}`, "document 1, item 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeManifests([]manifestFile{{name: "m.yaml", data: []byte(tt.data)}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestRetriable(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"invalid", apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, "web", nil), false},
		{"forbidden", apierrors.NewForbidden(gr, "web", errors.New("no")), false},
		{"bad request", apierrors.NewBadRequest("bad"), false},
		{"namespace not found", apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "shop"), true},
		{"unavailable", apierrors.NewServiceUnavailable("starting"), true},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), true},
		{"no match", &meta.NoKindMatchError{GroupKind: schema.GroupKind{Group: "example.com", Kind: "Widget"}}, true},
		{"network", &net.OpError{Op: "dial", Err: errors.New("connection refused")}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := retriable(tt.err); got != tt.want {
				t.Errorf("retriable(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}
