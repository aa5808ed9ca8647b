// Services the agent waits for: a Service whose server is no workload of the manifests but a
// component of the node (cluster DNS, served by kube-combined) is available when one of its
// EndpointSlices has a ready endpoint, which that component writes while it answers.

package agent

import (
	"context"
	"fmt"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// clusterDNSWork is the cluster DNS add-on as the agent waits for it: the kube-dns Service
// (internal/addons/coredns/coredns.yaml) with a ready endpoint.
var clusterDNSWork = workloadRef{Kind: "Service", Namespace: "kube-system", Name: "kube-dns"}

var endpointSlicesGVR = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}

// sliceSelector selects the EndpointSlices of the Service w.
func sliceSelector(w workloadRef) string {
	return labels.Set{discoveryv1.LabelServiceName: w.Name}.String()
}

// serviceVerdict fetches the Service's EndpointSlices (with get's resource version) and judges them.
func serviceVerdict(ctx context.Context, dyn dynamic.Interface, w workloadRef, get metav1.GetOptions) verdict {
	list, err := dyn.Resource(endpointSlicesGVR).Namespace(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sliceSelector(w), ResourceVersion: get.ResourceVersion})
	if err != nil {
		return verdict{why: err.Error()}
	}
	slices := make([]discoveryv1.EndpointSlice, len(list.Items))
	for i := range list.Items {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &slices[i]); err != nil {
			return verdict{why: err.Error()}
		}
	}
	return endpointsVerdict(slices)
}

// endpointsVerdict is ready when an endpoint of the slices is ready.
func endpointsVerdict(slices []discoveryv1.EndpointSlice) verdict {
	n := 0
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.Conditions.Ready != nil && *e.Conditions.Ready {
				return verdict{ready: true}
			}
			n++
		}
	}
	if n == 0 {
		return verdict{why: "no endpoints"}
	}
	return verdict{why: fmt.Sprintf("none of %d endpoints ready", n)}
}
