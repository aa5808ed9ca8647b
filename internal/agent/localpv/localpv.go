// Package localpv is the storage add-on's provisioner, run inside the agent: a
// PersistentVolumeClaim of a StorageClass whose provisioner is Name gets a new directory of the
// instance under a root directory, as a hostPath PersistentVolume bound to the node; a volume it
// made that is released and whose reclaim policy is Delete loses its directory, then is deleted.
//
// The protocol every external provisioner keeps with the persistent-volume controller and the
// scheduler (the claim's volume.kubernetes.io/storage-provisioner and selected-node annotations,
// WaitForFirstConsumer, the claim reference that binds, retries, events, the volume's finalizer
// and the Delete reclaim) is kept by Kubernetes' own library for it,
// sigs.k8s.io/sig-storage-lib-external-provisioner: this package only makes and removes
// directories. Running in the agent rather than in a pod of its own saves an instance a process,
// its pause and its share of a shim; making the directory itself saves a helper pod per volume.
package localpv

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// Name is the provisioner's name, which the storage add-on's StorageClass names.
const Name = "herd.dev/local-path"

// Root is where the agent makes volume directories, as the node's pods see its file system. It is
// inside the kubelet's root, which the agent bind-mounts from the instance's own state directory:
// volumes are on the instance's disk, never shared with another instance nor left on the host,
// and go when the instance is deleted.
const Root = "/var/lib/kubelet/local-path"

// annProvisionedBy names, on a volume, the provisioner that made it; the library sets it.
const annProvisionedBy = "pv.kubernetes.io/provisioned-by"

// Provisioner makes and removes the volumes of one node.
type Provisioner struct {
	Node string // the node's name: volumes are bound to it
	Root string // where volume directories are made, as the kubelet sees the node's files
	Log  *slog.Logger
}

// Run provisions and deletes volumes until ctx ends. The library's controller starts with the
// node's first claim: until then only a watch of the claims runs, which asks for nothing while
// nothing changes. The controller ticks ten times a second for as long as it runs, to expire
// entries of a set of claims to retry slowly (those a CSI driver refused as infeasible, which
// this provisioner's errors never are): in an instance with no claim, those ticks were half of
// the agent's wakeups while it idles.
func (p *Provisioner) Run(ctx context.Context, client kubernetes.Interface) {
	// The claims' informer, handed to the controller when it starts, as the library's own would
	// be: every namespace, indexed by namespace, resynced as often.
	claims := coreinformers.NewPersistentVolumeClaimInformer(client, metav1.NamespaceAll, controller.DefaultResyncPeriod,
		cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	first := make(chan struct{})
	var once sync.Once
	if _, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { once.Do(func() { close(first) }) },
	}); err != nil {
		p.Log.Error("storage: watching claims", "err", err)
		return
	}
	go claims.RunWithContext(ctx)
	select {
	case <-ctx.Done():
		return
	case <-first:
	}
	// The library logs through klog's context logger: into the agent's log, at its level.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(p.Log.Handler()))
	controller.NewProvisionController(ctx, client, Name, p,
		controller.ClaimsInformer(claims),
		// One node, one agent: nothing to elect.
		controller.LeaderElection(false),
		// A node's claims come a few at a time; one worker each for claims and volumes.
		controller.Threadiness(1),
		// A volume deleted by hand still loses its directory first.
		controller.AddFinalizer(true),
		// Its metrics stay unregistered and unserved (port 0, the default, said explicitly):
		// the agent serves its own registry.
		controller.MetricsPort(0),
	).Run(ctx)
}

// ShouldProvision says whether the claim is this node's to provision: a claim whose pod the
// scheduler put on another node is not.
func (p *Provisioner) ShouldProvision(_ context.Context, c *corev1.PersistentVolumeClaim) bool {
	node, selected := c.Annotations["volume.kubernetes.io/selected-node"]
	return !selected || node == p.Node
}

// Provision makes the claim's directory and returns its volume, bound to this node. The library
// adds the claim reference, the class name and the provisioned-by annotation, and creates it.
func (p *Provisioner) Provision(_ context.Context, o controller.ProvisionOptions) (*corev1.PersistentVolume, controller.ProvisioningState, error) {
	c := o.PVC
	if o.SelectedNodeName != "" && o.SelectedNodeName != p.Node {
		return nil, controller.ProvisioningFinished, &controller.IgnoredError{Reason: "the claim's pod is on node " + o.SelectedNodeName}
	}
	dir := filepath.Join(p.Root, o.PVName+"_"+c.Namespace+"_"+c.Name)
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("storage: %w", err)
	}
	// Any container user may write to its volume, as with a directory the pod made itself;
	// MkdirAll's mode is cut by the umask.
	if err := os.Chmod(dir, 0o777); err != nil {
		return nil, controller.ProvisioningFinished, fmt.Errorf("storage: %w", err)
	}
	reclaim := corev1.PersistentVolumeReclaimDelete
	if o.StorageClass.ReclaimPolicy != nil {
		reclaim = *o.StorageClass.ReclaimPolicy
	}
	dirType := corev1.HostPathDirectoryOrCreate
	p.Log.Info("storage: volume provisioned", "claim", c.Namespace+"/"+c.Name, "volume", o.PVName, "dir", dir)
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: c.Spec.Resources.Requests[corev1.ResourceStorage]},
			AccessModes:                   c.Spec.AccessModes,
			PersistentVolumeReclaimPolicy: reclaim,
			VolumeMode:                    c.Spec.VolumeMode,
			MountOptions:                  o.StorageClass.MountOptions,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{p.Node}}},
			}}}},
		},
	}, controller.ProvisioningFinished, nil
}

// Delete removes the volume's directory, if this provisioner made it: a volume of another
// provisioner, or whose directory is not under the root, is left alone (the library then leaves
// the volume too). The library deletes the volume once its directory is gone.
func (p *Provisioner) Delete(_ context.Context, v *corev1.PersistentVolume) error {
	if v.Annotations[annProvisionedBy] != Name || v.Spec.HostPath == nil {
		return &controller.IgnoredError{Reason: "not a volume of " + Name}
	}
	dir := filepath.Clean(v.Spec.HostPath.Path)
	if !strings.HasPrefix(dir, filepath.Clean(p.Root)+string(filepath.Separator)) {
		return &controller.IgnoredError{Reason: dir + " is not under " + p.Root}
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	p.Log.Info("storage: volume directory removed", "volume", v.Name, "dir", dir)
	return nil
}
