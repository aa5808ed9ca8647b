package controlplane_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/provider/fake"
)

// inProcess runs the control plane in the test's own process, as herd up --provider fake with a
// fresh data dir, logging to up.log (which c.waitFor prints on failure), until the test ends. It
// returns the cluster (for waitFor and scrape; not for c.herd, which needs the binary) and a
// client of its API.
func inProcess(t *testing.T) (*cluster, *client.Client) {
	t.Helper()
	return inProcessWith(t, func(*controlplane.Options) {})
}

// inProcessWith is inProcess with options changed by set.
func inProcessWith(t *testing.T, set func(*controlplane.Options)) (*cluster, *client.Client) {
	t.Helper()
	dir := t.TempDir()
	logFile, err := os.Create(filepath.Join(dir, "up.log"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	opts := controlplane.Options{
		DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0", Provider: fake.Name,
		ConfigPath: filepath.Join(dir, "config"),
		Logger:     slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready:      func(url string) { ready <- url },
	}
	set(&opts)
	go func() { done <- controlplane.Run(ctx, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("control plane: %v", err)
		}
		logFile.Close()
	})
	select {
	case <-ready:
	case err := <-done:
		done <- err // for the cleanup
		t.Fatalf("control plane did not start: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("control plane did not serve within 30s")
	}
	cfg, err := client.LoadConfig(filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir, addr: cfg.Server[len("http://"):]}
	return c, client.New(cfg)
}

// applyManifest applies the fleets of a YAML manifest through the API.
func applyManifest(t *testing.T, cl *client.Client, manifest string) {
	t.Helper()
	docs, err := v1alpha1.Decode([]byte(manifest))
	if err != nil {
		t.Fatal(err)
	}
	var fleets []v1alpha1.Fleet
	for _, d := range docs {
		f, ok := d.Object.(*v1alpha1.Fleet)
		if !ok {
			t.Fatal(errors.New("the manifest holds something other than a Fleet"))
		}
		fleets = append(fleets, *f)
	}
	if _, err := cl.Apply(context.Background(), fleets); err != nil {
		t.Fatalf("apply: %v", err)
	}
}
