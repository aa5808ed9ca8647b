package localpv

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

func testProvisioner(root string) *Provisioner {
	return &Provisioner{Node: "n1", Root: root, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// The provisioner removes only what it made: a released volume of its own whose directory is
// not under its root, and a volume of another provisioner under its root, are left alone, and
// said to be ignored so that the library leaves the volume too.
func TestDeleteLeavesWhatItDidNotMake(t *testing.T) {
	tmp := t.TempDir()
	p := testProvisioner(filepath.Join(tmp, "root"))
	outside, inside := filepath.Join(tmp, "root-other", "pvc-1"), filepath.Join(tmp, "root", "pvc-2")
	for _, dir := range []string{outside, inside} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	volume := func(provisioner, dir string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{
			ObjectMeta: metav1.ObjectMeta{Name: filepath.Base(dir), Annotations: map[string]string{annProvisionedBy: provisioner}},
			Spec: corev1.PersistentVolumeSpec{
				PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
				PersistentVolumeSource:        corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir}},
			},
			Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeReleased},
		}
	}
	for _, v := range []*corev1.PersistentVolume{volume(Name, outside), volume(Name, inside+"/../../root-other/pvc-1"), volume("example.com/other", inside)} {
		var ignored *controller.IgnoredError
		if err := p.Delete(context.Background(), v); !errors.As(err, &ignored) {
			t.Errorf("%s: got %v, want an IgnoredError", v.Spec.HostPath.Path, err)
		}
		if _, err := os.Stat(v.Spec.HostPath.Path); err != nil {
			t.Errorf("%s was removed: %v", v.Spec.HostPath.Path, err)
		}
	}
	if err := p.Delete(context.Background(), volume(Name, inside)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(inside); !os.IsNotExist(err) {
		t.Errorf("%s is still there: %v", inside, err)
	}
}

// A claim whose pod the scheduler put on another node is not this node's: nothing is made.
func TestProvisionIgnoresOtherNodesClaims(t *testing.T) {
	p := testProvisioner(t.TempDir())
	c := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "u1",
		Annotations: map[string]string{"volume.kubernetes.io/selected-node": "n2"}}}
	if p.ShouldProvision(context.Background(), c) {
		t.Error("ShouldProvision: another node's claim is said to be this node's")
	}
	_, _, err := p.Provision(context.Background(), controller.ProvisionOptions{
		StorageClass: &storagev1.StorageClass{}, PVName: "pvc-u1", PVC: c, SelectedNodeName: "n2"})
	var ignored *controller.IgnoredError
	if !errors.As(err, &ignored) {
		t.Errorf("Provision: got %v, want an IgnoredError", err)
	}
	if entries, _ := os.ReadDir(p.Root); len(entries) != 0 {
		t.Errorf("directories made for another node's claim: %v", entries)
	}
}

// A claim of this node's gets a directory any container user may write to, under the root, and
// a hostPath volume of its size and access modes, bound to the node, reclaimed as its class says.
func TestProvisionMakesDirectoryAndVolume(t *testing.T) {
	p := testProvisioner(t.TempDir())
	size := resource.MustParse("1Gi")
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "app", UID: "u1",
			Annotations: map[string]string{"volume.kubernetes.io/selected-node": "n1"}},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: size}},
		},
	}
	retain := corev1.PersistentVolumeReclaimRetain
	v, state, err := p.Provision(context.Background(), controller.ProvisionOptions{
		StorageClass: &storagev1.StorageClass{ReclaimPolicy: &retain}, PVName: "pvc-u1", PVC: c, SelectedNodeName: "n1"})
	if err != nil || state != controller.ProvisioningFinished {
		t.Fatalf("Provision: %v, %s", err, state)
	}
	dir := filepath.Join(p.Root, "pvc-u1_app_data")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o777 {
		t.Fatalf("directory %s: %v, %v; want mode 0777", dir, fi, err)
	}
	if v.Name != "pvc-u1" || v.Spec.HostPath == nil || v.Spec.HostPath.Path != dir {
		t.Errorf("volume %s, source %+v; want pvc-u1 on %s", v.Name, v.Spec.PersistentVolumeSource, dir)
	}
	if got := v.Spec.Capacity[corev1.ResourceStorage]; got.Cmp(size) != 0 || len(v.Spec.AccessModes) != 1 || v.Spec.PersistentVolumeReclaimPolicy != retain {
		t.Errorf("capacity %s, access modes %v, reclaim %s; want 1Gi, [ReadWriteOnce], Retain", got.String(), v.Spec.AccessModes, v.Spec.PersistentVolumeReclaimPolicy)
	}
	if terms := v.Spec.NodeAffinity.Required.NodeSelectorTerms; len(terms) != 1 || terms[0].MatchExpressions[0].Values[0] != "n1" {
		t.Errorf("node affinity %+v; want the node n1", terms)
	}
}

// hasAction reports whether the client was asked verb on resource.
func hasAction(cs *fake.Clientset, verb, resource string) bool {
	for _, a := range cs.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == resource {
			return true
		}
	}
	return false
}

// The library's controller (which reads volumes and classes, and ticks ten times a second while it
// runs) starts with the node's first claim: before it, only the claims are listed and watched.
func TestRunStartsTheControllerWithTheFirstClaim(t *testing.T) {
	cs := fake.NewClientset()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		testProvisioner(t.TempDir()).Run(ctx, cs)
	}()
	t.Cleanup(func() { cancel(); <-done })
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) { return cond(), nil })
		if err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	waitFor("the claims' watch", func() bool { return hasAction(cs, "watch", "persistentvolumeclaims") })
	if hasAction(cs, "list", "persistentvolumes") || hasAction(cs, "list", "storageclasses") {
		t.Fatal("the controller started before any claim")
	}
	claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "data"}}
	if _, err := cs.CoreV1().PersistentVolumeClaims("default").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the controller's list of volumes and classes", func() bool {
		return hasAction(cs, "list", "persistentvolumes") && hasAction(cs, "list", "storageclasses")
	})
}
