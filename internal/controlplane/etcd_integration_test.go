package controlplane_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/store/etcd"
	"herd.dev/herd/internal/store/etcd/etcdcluster"
)

// TestIntegrationEtcdStore runs herd up's control plane in-process on a real 3-member etcd
// cluster with the fake provider, applies a fleet through the API and sees its instances
// created, and finds the fleet and its instances in etcd under herd's prefix.
func TestIntegrationEtcdStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-member etcd cluster")
	}
	bin, err := etcdcluster.FindBinary()
	if err != nil {
		t.Skip(err)
	}
	ec, err := etcdcluster.Start(context.Background(), etcdcluster.Config{Dir: t.TempDir(), Binary: bin, DieWithParent: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ec.Stop() })

	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- controlplane.Run(ctx, controlplane.Options{
			DataDir:    filepath.Join(dir, "data"),
			Listen:     "127.0.0.1:0",
			Provider:   "fake",
			LBAddress:  "127.0.0.1",
			ConfigPath: filepath.Join(dir, "config"),
			Store:      controlplane.StoreEtcd,
			Etcd:       etcd.Config{Endpoints: ec.Endpoints()},
			Ready:      func(url string) { ready <- url },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control plane: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("control plane stopped before it served: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("control plane did not serve within 30s")
	}
	if _, err := os.Stat(filepath.Join(dir, "data", "state.db")); !os.IsNotExist(err) {
		t.Errorf("herd up on etcd made a bolt store in its data directory (stat: %v)", err)
	}

	cfg, err := client.LoadConfig(filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	api := client.New(cfg)
	docs, err := v1alpha1.Decode([]byte(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: web}
spec:
  image: hello
  replicas: {min: 1, max: 5, desired: 3}
  regions: [{name: local, provider: fake, options: {bootDelay: 50ms}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.Apply(ctx, []v1alpha1.Fleet{*docs[0].Object.(*v1alpha1.Fleet)}); err != nil {
		t.Fatalf("apply: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ins, err := api.ListInstances(ctx, "web")
		serving := 0
		for _, in := range ins {
			if in.Status.Phase == v1alpha1.PhaseReady {
				serving++
			}
		}
		if err == nil && serving == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %d instances, %d serving, err %v; want 3 ready", len(ins), serving, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	cli, err := clientv3.New(clientv3.Config{Endpoints: ec.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	for prefix, want := range map[string]int64{etcd.DefaultPrefix + "fleets/": 1, etcd.DefaultPrefix + "instances/": 3} {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil || resp.Count != want {
			t.Errorf("keys under %s in etcd = %v, %v; want %d", prefix, countOf(resp), err, want)
		}
	}
}

func countOf(resp *clientv3.GetResponse) string {
	if resp == nil {
		return "none"
	}
	return fmt.Sprint(resp.Count)
}
