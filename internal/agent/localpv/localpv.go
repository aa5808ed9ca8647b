// Package localpv is the storage add-on's provisioner, run inside the agent: a
// PersistentVolumeClaim of a StorageClass whose provisioner is Name gets a new directory of the
// instance under a root directory, as a hostPath PersistentVolume bound to the node; a volume it
// made that is released and whose reclaim policy is Delete loses its directory, then is deleted.
//
// It keeps the protocol every external provisioner keeps with the persistent-volume controller:
// that controller names the provisioner in the claim's volume.kubernetes.io/storage-provisioner
// annotation, the scheduler names the node in volume.kubernetes.io/selected-node when the class
// waits for the first consumer, and the controller binds the claim to the volume made for it
// (spec.claimRef). Running in the agent rather than in a pod of its own saves an instance a
// process, its pause and its share of a shim; making the directory itself saves a helper pod
// per volume.
package localpv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Name is the provisioner's name, which the storage add-on's StorageClass names.
const Name = "herd.dev/local-path"

// Root is where the agent makes volume directories, as the node's pods see its file system. It is
// inside the kubelet's root, which the agent bind-mounts from the instance's own state directory:
// volumes are on the instance's disk, never shared with another instance nor left on the host,
// and go when the instance is deleted.
const Root = "/var/lib/kubelet/local-path"

// Annotations of the protocol with the persistent-volume controller and the scheduler.
const (
	annProvisioner   = "volume.kubernetes.io/storage-provisioner"
	annSelectedNode  = "volume.kubernetes.io/selected-node"
	annProvisionedBy = "pv.kubernetes.io/provisioned-by"
)

var (
	pvcsGVR    = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumeclaims"}
	pvsGVR     = schema.GroupVersionResource{Version: "v1", Resource: "persistentvolumes"}
	classesGVR = schema.GroupVersionResource{Group: "storage.k8s.io", Version: "v1", Resource: "storageclasses"}
)

// Provisioner makes and removes the volumes of one node.
type Provisioner struct {
	Dyn  dynamic.Interface
	Node string // the node's name: volumes are bound to it
	Root string // where volume directories are made, as the kubelet sees the node's files
	Log  *slog.Logger
}

// key is one claim ("claim", namespace, name) or one volume ("volume", "", name) to look at.
type key struct{ kind, namespace, name string }

// Run provisions and deletes volumes until ctx ends.
func (p *Provisioner) Run(ctx context.Context) {
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[key]())
	go func() { <-ctx.Done(); q.ShutDown() }()
	informers := map[string]cache.SharedIndexInformer{}
	for kind, gvr := range map[string]schema.GroupVersionResource{"claim": pvcsGVR, "volume": pvsGVR} {
		inf := dynamicinformer.NewFilteredDynamicInformer(p.Dyn, gvr, metav1.NamespaceAll, 0, cache.Indexers{}, nil).Informer()
		enqueue := func(obj any) {
			if m, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				ns, name, _ := cache.SplitMetaNamespaceKey(m)
				q.Add(key{kind, ns, name})
			}
		}
		_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    enqueue,
			UpdateFunc: func(_, obj any) { enqueue(obj) },
		})
		informers[kind] = inf
		go inf.RunWithContext(ctx)
	}
	for {
		k, shutdown := q.Get()
		if shutdown {
			return
		}
		obj, exists, err := informers[k.kind].GetStore().GetByKey(cache.NewObjectName(k.namespace, k.name).String())
		if err == nil && exists {
			err = p.sync(ctx, k.kind, obj.(*unstructured.Unstructured))
		}
		if err != nil && ctx.Err() == nil {
			p.Log.Warn("storage: will retry", "kind", k.kind, "namespace", k.namespace, "name", k.name, "err", err)
			q.AddRateLimited(k)
		} else {
			q.Forget(k)
		}
		q.Done(k)
	}
}

func (p *Provisioner) sync(ctx context.Context, kind string, u *unstructured.Unstructured) error {
	if kind == "claim" {
		var c corev1.PersistentVolumeClaim
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &c); err != nil {
			return err
		}
		return p.provision(ctx, &c)
	}
	var v corev1.PersistentVolume
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		return err
	}
	return p.reclaim(ctx, &v)
}

// provision makes the volume of c, if c is a claim of this provisioner's waiting for one.
func (p *Provisioner) provision(ctx context.Context, c *corev1.PersistentVolumeClaim) error {
	if c.Spec.VolumeName != "" || c.Annotations[annProvisioner] != Name || c.DeletionTimestamp != nil {
		return nil
	}
	node, selected := c.Annotations[annSelectedNode]
	if selected && node != p.Node {
		return nil
	}
	if c.Spec.StorageClassName == nil {
		return nil
	}
	var class storagev1.StorageClass
	u, err := p.Dyn.Resource(classesGVR).Get(ctx, *c.Spec.StorageClassName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &class); err != nil {
		return err
	}
	if class.Provisioner != Name {
		return nil
	}
	if !selected && class.VolumeBindingMode != nil && *class.VolumeBindingMode == storagev1.VolumeBindingWaitForFirstConsumer {
		return nil // the scheduler names the node when a pod uses the claim
	}
	if c.Spec.VolumeMode != nil && *c.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		p.Log.Warn("storage: a claim asks for a block volume; volumes here are directories", "namespace", c.Namespace, "name", c.Name)
		return nil
	}
	name := "pvc-" + string(c.UID)
	dir := filepath.Join(p.Root, name+"_"+c.Namespace+"_"+c.Name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	// Any container user may write to its volume, as with a directory the pod made itself;
	// MkdirAll's mode is cut by the umask.
	if err := os.Chmod(dir, 0o777); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if class.ReclaimPolicy != nil {
		reclaim = *class.ReclaimPolicy
	}
	dirType := corev1.HostPathDirectoryOrCreate
	pv := corev1.PersistentVolume{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "PersistentVolume"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annProvisionedBy: Name}},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: c.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			StorageClassName:              class.Name,
			VolumeMode:                    c.Spec.VolumeMode,
			MountOptions:                  class.MountOptions,
			ClaimRef: &corev1.ObjectReference{
				Kind: "PersistentVolumeClaim", APIVersion: "v1",
				Namespace: c.Namespace, Name: c.Name, UID: c.UID, ResourceVersion: c.ResourceVersion,
			},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{p.Node}}},
			}}}},
		},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pv)
	if err != nil {
		return err
	}
	_, err = p.Dyn.Resource(pvsGVR).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("storage: creating %s: %w", name, err)
	}
	if err == nil {
		p.Log.Info("storage: volume provisioned", "claim", c.Namespace+"/"+c.Name, "volume", name, "dir", dir)
	}
	return nil
}

// reclaim removes the directory of v and v, if this provisioner made v and it is released with
// reclaim policy Delete.
func (p *Provisioner) reclaim(ctx context.Context, v *corev1.PersistentVolume) error {
	if v.Annotations[annProvisionedBy] != Name || v.Status.Phase != corev1.VolumeReleased ||
		v.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete || v.Spec.HostPath == nil {
		return nil
	}
	dir := filepath.Clean(v.Spec.HostPath.Path)
	if !strings.HasPrefix(dir, filepath.Clean(p.Root)+string(filepath.Separator)) {
		return nil // not a directory this provisioner makes: leave it
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	err := p.Dyn.Resource(pvsGVR).Delete(ctx, v.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &v.UID}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("storage: deleting %s: %w", v.Name, err)
	}
	p.Log.Info("storage: volume deleted", "volume", v.Name, "dir", dir)
	return nil
}
