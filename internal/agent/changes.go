// What wakes the monitor: a watch of the node and of each workload (of a Service's EndpointSlices).

package agent

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// watchChanges watches the node and every workload until ctx ends, and sends on changed (without
// blocking: one pending signal stands for any number of changes) whenever one of them is listed,
// added, changed or deleted. Each is an informer of the one object (a field selector on its
// name), which lists and watches again by itself after an error.
func watchChanges(ctx context.Context, dyn dynamic.Interface, node string, works []workloadRef, changed chan<- struct{}) {
	signal := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    signal,
		UpdateFunc: func(_, obj any) { signal(obj) },
		DeleteFunc: signal,
	}
	watch := func(gvr schema.GroupVersionResource, namespace string, selector func(*metav1.ListOptions)) {
		inf := dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, namespace, 0, cache.Indexers{}, selector).Informer()
		_, _ = inf.AddEventHandler(handler)
		go inf.RunWithContext(ctx)
	}
	byName := func(name string) func(*metav1.ListOptions) {
		return func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}
	}
	watch(nodesGVR, metav1.NamespaceAll, byName(node))
	for _, w := range works {
		if w.Kind == "Service" {
			// Its EndpointSlices, which say whether it is available.
			watch(w.gvr(), w.Namespace, func(o *metav1.ListOptions) { o.LabelSelector = sliceSelector(w) })
			continue
		}
		watch(w.gvr(), w.Namespace, byName(w.Name))
	}
}
