package agent

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var (
	podsGVR  = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	nodesGVR = schema.GroupVersionResource{Version: "v1", Resource: "nodes"}
)

// addonNamespace holds the cluster's add-ons, which stopWorkload leaves to stop with the cluster.
const addonNamespace = metav1.NamespaceSystem

// podOwners are the kinds whose objects make pods: they are deleted before the pods, so that no
// pod is made again while the workload stops.
var podOwners = []schema.GroupVersionResource{
	{Group: "batch", Version: "v1", Resource: "cronjobs"},
	{Group: "apps", Version: "v1", Resource: "deployments"},
	{Group: "apps", Version: "v1", Resource: "statefulsets"},
	{Group: "apps", Version: "v1", Resource: "daemonsets"},
	{Group: "apps", Version: "v1", Resource: "replicasets"},
	{Group: "batch", Version: "v1", Resource: "jobs"},
}

// stopWorkload stops the workload gracefully through the API: it deletes every object that makes
// pods, then every pod (each with its own grace period, so its containers get SIGTERM and their
// terminationGracePeriodSeconds), and waits until no container runs any more or ctx ends. It does
// not wait for the kubelet to clean up after the containers (volumes, sandboxes, the final removal
// of the pod objects, done at its next housekeeping, seconds later): the cluster is stopped next.
// It returns the number of pods with containers still running.
//
// The cluster's add-ons (kube-system: cluster DNS) are left running: the workload may still
// resolve names while it drains, and they stop with the cluster.
func stopWorkload(ctx context.Context, dyn dynamic.Interface) (int, error) {
	bg := metav1.DeletePropagationBackground
	for _, gvr := range podOwners {
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return -1, err
		}
		for _, it := range list.Items {
			if it.GetDeletionTimestamp() != nil || it.GetNamespace() == addonNamespace {
				continue
			}
			err := dyn.Resource(gvr).Namespace(it.GetNamespace()).Delete(ctx, it.GetName(), metav1.DeleteOptions{PropagationPolicy: &bg})
			if err != nil && !apierrors.IsNotFound(err) {
				return -1, err
			}
		}
	}
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	for {
		list, err := dyn.Resource(podsGVR).List(ctx, metav1.ListOptions{})
		if err != nil {
			return -1, err
		}
		running := 0
		for _, p := range list.Items {
			if p.GetNamespace() == addonNamespace {
				continue
			}
			if p.GetDeletionTimestamp() == nil {
				running++
				err := dyn.Resource(podsGVR).Namespace(p.GetNamespace()).Delete(ctx, p.GetName(), metav1.DeleteOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					return running, err
				}
				continue
			}
			if containersRunning(p) {
				running++
			}
		}
		if running == 0 {
			return 0, nil
		}
		select {
		case <-ctx.Done():
			return running, ctx.Err()
		case <-t.C:
		}
	}
}

// containersRunning reports whether the pod's status shows a container (init or not) running.
func containersRunning(p unstructured.Unstructured) bool {
	for _, key := range []string{"initContainerStatuses", "containerStatuses", "ephemeralContainerStatuses"} {
		cs, _, _ := unstructured.NestedSlice(p.Object, "status", key)
		for _, c := range cs {
			if m, ok := c.(map[string]any); ok {
				if _, running, _ := unstructured.NestedMap(m, "state", "running"); running {
					return true
				}
			}
		}
	}
	return false
}
