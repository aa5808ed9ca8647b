package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/provider"
)

func TestKubeconfigIsTheAgents(t *testing.T) {
	p, digest := newTestProvider(t, "/bin/true")
	ctx := context.Background()
	dir := p.InstanceDir("web-1")
	if err := os.MkdirAll(filepath.Join(dir, agentDirName), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(dir, &record{Spec: provider.InstanceSpec{Name: "web-1", Image: digest}}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Kubeconfig(ctx, "nope"); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("unknown instance: %v, want ErrNotFound", err)
	}
	if _, err := p.Kubeconfig(ctx, "web-1"); !errors.Is(err, provider.ErrNoKubeAccess) {
		t.Fatalf("before the agent wrote its kubeconfig: %v, want ErrNoKubeAccess", err)
	}
	if err := os.WriteFile(filepath.Join(dir, agentDirName, agent.KubeconfigFile), []byte("kc"), 0o600); err != nil {
		t.Fatal(err)
	}
	if kc, err := p.Kubeconfig(ctx, "web-1"); err != nil || string(kc) != "kc" {
		t.Fatalf("after: %q %v, want the agent's kubeconfig", kc, err)
	}
}
