// The pods the agent's /metrics counts, kept by a watch instead of a list per scrape.

package agent

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// watchPods keeps every pod's phase and containers' restart counts until ctx ends. herd up reads
// every serving instance's /metrics every 2 s: a list of every pod per read was most of an idle
// instance's API requests; the watch asks for nothing while nothing changes.
func watchPods(ctx context.Context, dyn dynamic.Interface) cache.SharedIndexInformer {
	inf := dynamicinformer.NewFilteredDynamicInformer(dyn, podsGVR, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
	_ = inf.SetTransform(podCountsOnly)
	go inf.RunWithContext(ctx)
	return inf
}

// podCountsOnly keeps of a pod what podCounts reads (and its key): a few bytes instead of the
// whole pod.
func podCountsOnly(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	status := map[string]any{}
	if phase, ok, _ := unstructured.NestedString(u.Object, "status", "phase"); ok {
		status["phase"] = phase
	}
	for _, key := range []string{"containerStatuses", "initContainerStatuses"} {
		cs, _, _ := unstructured.NestedSlice(u.Object, "status", key)
		var kept []any
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				kept = append(kept, map[string]any{"restartCount": m["restartCount"]})
			}
		}
		if kept != nil {
			status[key] = kept
		}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"metadata": map[string]any{
			"name": u.GetName(), "namespace": u.GetNamespace(), "uid": string(u.GetUID()),
			"resourceVersion": u.GetResourceVersion(),
		},
		"status": status,
	}}, nil
}

// cachedPods are the watched pods, or false until the watch has listed them.
func cachedPods(inf cache.SharedIndexInformer) ([]unstructured.Unstructured, bool) {
	if inf == nil || !inf.HasSynced() {
		return nil, false
	}
	var out []unstructured.Unstructured
	for _, o := range inf.GetStore().List() {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, *u)
		}
	}
	return out, true
}
