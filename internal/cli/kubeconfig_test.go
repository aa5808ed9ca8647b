package cli

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/events/eventstest"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// noKube is a provider whose instances' API servers are not up yet.
type noKube struct{}

func (noKube) Kubeconfig(ctx context.Context, name string) ([]byte, error) {
	return nil, provider.ErrNoKubeAccess
}

// debugEnv is an API server with one instance, web-1, of a provider giving Kubernetes access,
// and a client config for it.
func debugEnv(t *testing.T) (config string, events *eventstest.Recorder) {
	st := memory.New()
	in := &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: "web-1"}, Spec: v1alpha1.InstanceSpec{Fleet: "web", Provider: "local"}}
	op, err := store.PutOp(store.Instances, in)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Txn(context.Background(), op); err != nil {
		t.Fatal(err)
	}
	events = &eventstest.Recorder{}
	const token = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(apiserver.New(apiserver.Options{Store: st, Token: token, Events: events,
		KubeAccess: map[string]provider.KubeAccessor{"local": noKube{}}}))
	t.Cleanup(srv.Close)
	config = filepath.Join(t.TempDir(), "config")
	if err := client.SaveConfig(config, &client.Config{Server: srv.URL, Token: token}); err != nil {
		t.Fatal(err)
	}
	return config, events
}

func runHerd(config string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := NewRootCmd(&out, &out)
	cmd.SetArgs(append([]string{"--config", config}, args...))
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func TestKubeconfigWritesASecretFile(t *testing.T) {
	config, events := debugEnv(t)
	file := filepath.Join(t.TempDir(), "kc")
	if err := os.WriteFile(file, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runHerd(config, "kubeconfig", "web-1", "-o", file); err != nil {
		t.Fatalf("herd kubeconfig: %v\n%s", err, out)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig mode %v, want 0600", st.Mode().Perm())
	}
	kc, err := clientcmd.LoadFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cur := kc.Contexts[kc.CurrentContext]
	if cur == nil || !strings.HasSuffix(kc.Clusters[cur.Cluster].Server, "/v1/instances/web-1/kube") || !strings.HasPrefix(kc.AuthInfos[cur.AuthInfo].Token, "herdkube_") {
		t.Fatalf("kubeconfig does not point at web-1's proxy route with a kube token:\n%+v", kc)
	}
	if events.Count(apiserver.EventKubeconfigIssued) != 1 {
		t.Fatalf("events %v, want one %s", events.Reasons(), apiserver.EventKubeconfigIssued)
	}
}

func TestDebugCommandsBadInput(t *testing.T) {
	config, events := debugEnv(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"kubeconfig", "nope"}, "see herd get instances"},
		{[]string{"kubectl", "web-1", "get", "pods"}, "herd kubectl INSTANCE -- get pods -A"},
		{[]string{"logs", "nope"}, "see herd get instances"},
		{[]string{"logs", "web-1"}, "try again once herd get instances shows it Ready"},
		{[]string{"logs", "fleet/nope"}, "see herd get fleets"},
		{[]string{"logs", "web-1", "-o", "yaml"}, "-o \"yaml\""},
	} {
		out, err := runHerd(config, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("herd %s: %v %s, want an error with %q", strings.Join(tc.args, " "), err, out, tc.want)
		}
	}
	if n := events.Count(apiserver.EventKubeconfigIssued); n != 0 {
		t.Fatalf("%d kubeconfigs issued by refused commands", n)
	}
}
