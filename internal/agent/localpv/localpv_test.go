package localpv

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The provisioner removes only what it made: a released volume of its own whose directory is
// not under its root, and a volume of another provisioner under its root, are left alone (the
// tests give it no API client: asking the API server anything would panic).
func TestReclaimLeavesWhatItDidNotMake(t *testing.T) {
	tmp := t.TempDir()
	p := &Provisioner{Node: "n1", Root: filepath.Join(tmp, "root"), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
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
	for _, v := range []*corev1.PersistentVolume{volume(Name, outside), volume("example.com/other", inside)} {
		if err := p.reclaim(context.Background(), v); err != nil {
			t.Errorf("%s: %v", v.Spec.HostPath.Path, err)
		}
		if _, err := os.Stat(v.Spec.HostPath.Path); err != nil {
			t.Errorf("%s was removed: %v", v.Spec.HostPath.Path, err)
		}
	}
}

// A claim is provisioned only once the persistent-volume controller names this provisioner in
// it, and only for this node when the scheduler has picked one; else nothing is asked or made.
func TestProvisionIgnoresClaimsNotItsOwn(t *testing.T) {
	p := &Provisioner{Node: "n1", Root: t.TempDir(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	class := "local-path"
	for name, ann := range map[string]map[string]string{
		"another provisioner's": {annProvisioner: "example.com/other"},
		"no provisioner named":  nil,
		"another node's":        {annProvisioner: Name, annSelectedNode: "n2"},
	} {
		c := &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "default", UID: "u1", Annotations: ann},
			Spec:       corev1.PersistentVolumeClaimSpec{StorageClassName: &class},
		}
		if err := p.provision(context.Background(), c); err != nil {
			t.Errorf("%s claim: %v", name, err)
		}
	}
	if entries, _ := os.ReadDir(p.Root); len(entries) != 0 {
		t.Errorf("directories made for claims not its own: %v", entries)
	}
}
