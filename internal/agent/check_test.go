package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// The boot's checks read the node and the workloads from etcd (no resourceVersion: a quorum
// read); once the instance is up, monitor reads them from the API server's watch cache
// (resourceVersion=0), so that an idle instance costs etcd no read every 2 s.
func TestChecksReadFromEtcdAndMonitorFromTheCache(t *testing.T) {
	var mu sync.Mutex
	seen := map[string][]string{} // path -> resourceVersion of each GET
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path] = append(seen[r.URL.Path], r.URL.Query().Get("resourceVersion"))
		mu.Unlock()
		http.NotFound(w, r)
	}))
	defer srv.Close()
	a := helloAgent(t, srv.URL)
	paths := []string{"/api/v1/nodes/n1", "/apis/apps/v1/namespaces/default/deployments/hello"}
	reads := func() map[string][]string {
		mu.Lock()
		defer mu.Unlock()
		out := map[string][]string{}
		for _, p := range paths {
			out[p] = slices.Clone(seen[p])
		}
		clear(seen)
		return out
	}

	if r := a.check(context.Background(), false); r.ready {
		t.Fatal("ready with neither the node nor the workload found")
	}
	for p, rvs := range reads() {
		if !slices.Equal(rvs, []string{""}) {
			t.Errorf("the boot's check read %s with resourceVersions %q, want one quorum read (none)", p, rvs)
		}
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.monitor(ctx, newFakeNode(), 100*time.Millisecond) }()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(seen[paths[0]]) > 0 && len(seen[paths[1]]) > 0, nil
	})
	cancel()
	if err != nil {
		t.Fatalf("monitor read neither the node nor the workload: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for p, rvs := range reads() {
		for _, rv := range rvs {
			if rv != "0" {
				t.Errorf("monitor read %s with resourceVersion %q, want 0 (the watch cache)", p, rv)
			}
		}
	}
	if l := a.live.Load(); l == nil || l.ready {
		t.Errorf("monitor's verdict %+v, want not ready (nothing found)", l)
	}
}

// helloAgent is an agent of node n1 with one workload, Deployment default/hello, whose API server
// is at host.
func helloAgent(t *testing.T, host string) *agent {
	t.Helper()
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	return &agent{cfg: Config{Name: "n1"}, dyn: dyn, works: []workloadRef{{Kind: "Deployment", Namespace: "default", Name: "hello"}}}
}
