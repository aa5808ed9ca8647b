package agent

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	yamlutil "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// FieldManager is the field manager of every object the agent applies.
const FieldManager = "herd"

// manifestFile is one manifest file of a bundle.
type manifestFile struct {
	name      string // as recorded in the bundle (e.g. "manifests/deployment.yaml")
	data      []byte
	namespace string // for namespaced objects that name none; "" is default
}

// object is one object decoded from a manifest, with where it came from.
type object struct {
	obj  *unstructured.Unstructured
	file string
	doc  int // 1-based index of the YAML document in the file
	// namespace is where the object goes if it is namespaced and names none ("" is default).
	namespace string
}

func (o object) describe() string {
	ns := o.obj.GetNamespace()
	if ns != "" {
		ns += "/"
	}
	return fmt.Sprintf("%s %s%s (%s, document %d)", o.obj.GetKind(), ns, o.obj.GetName(), o.file, o.doc)
}

// decodeManifests decodes every YAML (or JSON) document of the files into objects, in order.
// Empty documents are skipped; a List's items are expanded. Every object needs apiVersion, kind
// and metadata.name.
func decodeManifests(files []manifestFile) ([]object, error) {
	var out []object
	for _, f := range files {
		r := yamlutil.NewYAMLReader(bufio.NewReader(bytes.NewReader(f.data)))
		for doc := 1; ; doc++ {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", f.name, doc, err)
			}
			var m map[string]any
			if err := yaml.Unmarshal(raw, &m); err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", f.name, doc, err)
			}
			if len(m) == 0 {
				continue
			}
			u := &unstructured.Unstructured{Object: m}
			if u.IsList() {
				list, err := u.ToList()
				if err != nil {
					return nil, fmt.Errorf("%s: document %d: %w", f.name, doc, err)
				}
				for i := range list.Items {
					it := list.Items[i]
					if err := checkObject(&it); err != nil {
						return nil, fmt.Errorf("%s: document %d, item %d: %w", f.name, doc, i+1, err)
					}
					out = append(out, object{obj: &it, file: f.name, doc: doc, namespace: f.namespace})
				}
				continue
			}
			if err := checkObject(u); err != nil {
				return nil, fmt.Errorf("%s: document %d: %w", f.name, doc, err)
			}
			out = append(out, object{obj: u, file: f.name, doc: doc, namespace: f.namespace})
		}
	}
	return out, nil
}

func checkObject(u *unstructured.Unstructured) error {
	switch {
	case u.GetAPIVersion() == "":
		return errors.New("apiVersion is missing")
	case u.GetKind() == "":
		return errors.New("kind is missing")
	case u.GetName() == "" && u.GetGenerateName() == "":
		return fmt.Errorf("%s: metadata.name is missing", u.GetKind())
	case u.GetName() == "":
		return fmt.Errorf("%s: metadata.generateName cannot be applied: give it a metadata.name", u.GetKind())
	}
	return nil
}

// applyOrder sorts objects so that those others may depend on come first: Namespaces, then
// CustomResourceDefinitions, then everything else in manifest order.
func applyOrder(objs []object) []object {
	rank := func(o object) int {
		gk := o.obj.GroupVersionKind().GroupKind()
		switch gk {
		case schema.GroupKind{Kind: "Namespace"}:
			return 0
		case schema.GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:
			return 1
		}
		return 2
	}
	out := append([]object(nil), objs...)
	sort.SliceStable(out, func(i, j int) bool { return rank(out[i]) < rank(out[j]) })
	return out
}

// workloadRef names a baked workload whose availability gates readiness.
type workloadRef struct {
	Kind      string // Deployment, StatefulSet, DaemonSet, or Service (endpoints.go)
	Namespace string
	Name      string
}

func (w workloadRef) String() string { return w.Kind + " " + w.Namespace + "/" + w.Name }

// gvr is the workload's resource.
func (w workloadRef) gvr() schema.GroupVersionResource {
	if w.Kind == "Service" {
		return endpointSlicesGVR
	}
	return schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: workloadKinds[w.Kind]}
}

// workloadKinds are the apps/v1 kinds the agent waits for.
var workloadKinds = map[string]string{"Deployment": "deployments", "StatefulSet": "statefulsets", "DaemonSet": "daemonsets"}

// applier applies objects with server-side apply.
type applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
	// retryFor bounds the retries of an object that fails for a reason that may pass (the API
	// server still starting, its namespace not there yet, a CRD not established yet).
	retryFor time.Duration
}

// defaultApplyRetry is the applier's retryFor unless the agent is Patient.
const defaultApplyRetry = 30 * time.Second

func newApplier(cfg *rest.Config, dyn dynamic.Interface, retryFor time.Duration) (*applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), retryFor: retryFor}, nil
}

// apply applies every object (in applyOrder) and returns the workloads among them.
func (a *applier) apply(ctx context.Context, objs []object) ([]workloadRef, error) {
	var works []workloadRef
	for _, o := range applyOrder(objs) {
		ns, err := a.applyOne(ctx, o)
		if err != nil {
			return nil, err
		}
		gvk := o.obj.GroupVersionKind()
		if _, ok := workloadKinds[gvk.Kind]; ok && gvk.Group == "apps" {
			works = append(works, workloadRef{Kind: gvk.Kind, Namespace: ns, Name: o.obj.GetName()})
		}
	}
	return works, nil
}

// applyOne applies one object, retrying while the failure may pass. It returns the namespace
// the object went to ("" for a cluster-scoped one).
func (a *applier) applyOne(ctx context.Context, o object) (string, error) {
	deadline := time.Now().Add(a.retryFor)
	backoff := 100 * time.Millisecond
	for {
		ns, err := a.tryApply(ctx, o)
		if err == nil {
			return ns, nil
		}
		if !retriable(err) || time.Now().After(deadline) {
			return "", fmt.Errorf("applying %s: %w", o.describe(), err)
		}
		if meta.IsNoMatchError(err) {
			a.mapper.Reset()
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("applying %s: %w", o.describe(), ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

func (a *applier) tryApply(ctx context.Context, o object) (string, error) {
	gvk := o.obj.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return "", err
	}
	obj := o.obj.DeepCopy()
	var ri dynamic.ResourceInterface
	ns := ""
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		ns = obj.GetNamespace()
		if ns == "" {
			ns = cmp.Or(o.namespace, metav1.NamespaceDefault)
			obj.SetNamespace(ns)
		}
		ri = a.dyn.Resource(m.Resource).Namespace(ns)
	} else {
		if obj.GetNamespace() != "" {
			return "", fmt.Errorf("%s is cluster-scoped but metadata.namespace is %q: remove it", gvk.Kind, obj.GetNamespace())
		}
		ri = a.dyn.Resource(m.Resource)
	}
	_, err = ri.Apply(ctx, obj.GetName(), obj, metav1.ApplyOptions{FieldManager: FieldManager, Force: true})
	return ns, err
}

// retriable reports whether an apply error may pass by itself.
func retriable(err error) bool {
	if meta.IsNoMatchError(err) {
		return true // a CRD applied just before may not be served yet
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) || apierrors.IsTooManyRequests(err) ||
		apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) {
		return true
	}
	// The namespace may be applied by a manifest of an earlier run or made by the API server
	// just after start (default); an object in a namespace that does not exist yet is NotFound.
	if apierrors.IsNotFound(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection refused") || strings.Contains(msg, "EOF")
}
