package local_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/kubebin"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
	"herd.dev/herd/internal/provider/providertest"
)

// readyTimeout bounds an instance's boot in the integration tests (measured: ~6-10 s).
const readyTimeout = 3 * time.Minute

// helloPort is the NodePort the hello example's Service answers on.
const helloPort = 30080

// herdBinary builds herd and herd-agent (which each instance runs) into the test's temporary
// directory and returns herd's path.
func herdBinary(t *testing.T) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "herd")
	cmd := exec.Command("go", "build", "-o", dir+"/", "./cmd/herd", "./cmd/herd-agent")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/herd ./cmd/herd-agent: %v\n%s", err, out)
	}
	return bin
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the herd module")
	}
	return filepath.Dir(mod), nil
}

// realEnv skips unless real instances can run here, and returns a provider on a test-only data
// directory holding the hello example's bundle.
func realEnv(t *testing.T) (*local.Provider, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("real instances: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("real instances need root (network namespaces, bridges, cgroups)")
	}
	bin := herdBinary(t)
	if err := local.CheckHost(bin); err != nil {
		t.Skipf("real instances cannot run here (run make deps and make kubernetes): %v", err)
	}
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	// A short data directory: containerd's sockets live in the instance's state directory, and a
	// unix socket path has at most 104 usable bytes (t.TempDir() is too long for that).
	dataDir, err := os.MkdirTemp("", "hl-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dataDir) })
	store := image.NewStore(image.StoreDir(dataDir))
	if _, err := image.Build(context.Background(), filepath.Join(root, "examples", "hello", "image.yaml"), store, nil); err != nil {
		t.Fatalf("build the hello image: %v", err)
	}
	// Taken after the builds, which need no exclusive access.
	localtest.Exclusive(t)
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	p, err := local.New(local.Options{DataDir: dataDir, HerdBinary: bin, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	return p, dataDir
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// owned is everything instances of these names in region may have made on the host.
func owned(p *local.Provider, dirs []string, region string, names ...string) localtest.Owned {
	o := localtest.Owned{Dirs: dirs}
	if region != "" {
		router, internet, veth := p.Lab().RegionHostNames(region)
		o.Links = append(o.Links, p.BridgeName(region), veth)
		o.Netns = append(o.Netns, router, internet)
	}
	for _, n := range names {
		ns, veth, cg := local.HostNames(n)
		o.Netns = append(o.Netns, ns)
		o.Links = append(o.Links, veth)
		o.Cgroups = append(o.Cgroups, strings.TrimPrefix(cg, "/"))
		o.Gone = append(o.Gone, p.InstanceDir(n))
	}
	return o
}

// dumpOnFailure logs the tail of an instance's agent log and component logs when the test failed.
func dumpOnFailure(t *testing.T, p *local.Provider, name string) {
	if !t.Failed() {
		return
	}
	dir := p.InstanceDir(name)
	files := []string{filepath.Join(dir, "agent.log"), filepath.Join(dir, "agent", "status.json")}
	logs, _ := filepath.Glob(filepath.Join(dir, "agent", "logs", "*.log"))
	files = append(files, logs...)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > 3000 {
			data = data[len(data)-3000:]
		}
		t.Logf("--- %s (tail)\n%s", f, data)
	}
}

// getApp asks the hello app at address:30080 until it answers 200 or timeout passes.
func getApp(t *testing.T, address string, timeout time.Duration) map[string]string {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	url := fmt.Sprintf("http://%s:%d/", address, helloPort)
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				var out map[string]string
				if err := json.Unmarshal(body, &out); err != nil {
					t.Fatalf("%s answered %q: %v", url, body, err)
				}
				return out
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not answer within %s: %s", url, timeout, last)
	return nil
}

// TestIntegrationInstances boots two real instances of the hello example: the app answers on
// both addresses, kubectl sees each node Ready, an instance whose processes are all killed is
// reported Failed, and Delete leaves nothing behind.
func TestIntegrationInstances(t *testing.T) {
	p, dataDir := realEnv(t)
	before := localtest.Take(t)
	ctx := context.Background()
	region := "itest"
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%100000)
	a, b := "it-"+suffix+"-a", "it-"+suffix+"-b"
	localtest.CleanupOnInterrupt(t, func() {
		dumpOnFailure(t, p, a)
		dumpOnFailure(t, p, b)
		for _, n := range []string{a, b} {
			if err := p.Delete(context.Background(), n); err != nil {
				t.Errorf("cleanup: %v", err)
			}
		}
		localtest.AssertClean(t, before, owned(p, []string{dataDir}, region, a, b))
	})
	labels := map[string]string{"herd.dev/fleet": "itest", "herd.dev/revision": "itest-1", "herd.dev/region": region}
	start := time.Now()
	var created []provider.Instance
	for _, n := range []string{a, b} {
		in, err := p.Create(ctx, provider.InstanceSpec{Name: n, Image: "hello", Region: region, Labels: labels})
		if err != nil {
			t.Fatalf("Create %s: %v", n, err)
		}
		if in.State != provider.StateBooting || in.Address == "" || !strings.HasPrefix(in.Image, "sha256:") {
			t.Fatalf("Create %s returned %+v", n, in)
		}
		created = append(created, in)
	}
	t.Logf("both creates returned after %s", time.Since(start).Round(time.Millisecond))
	if created[0].Address == created[1].Address {
		t.Fatalf("both instances got %s", created[0].Address)
	}

	for _, in := range created {
		providertest.WaitForState(t, p, in.Name, provider.StateReady, readyTimeout)
		t.Logf("%s Ready %s after the first Create", in.Name, time.Since(start).Round(time.Millisecond))
		got := getApp(t, in.Address, 30*time.Second)
		if got["instance"] != in.Name {
			t.Errorf("the app on %s says it runs on %q, want %q", in.Address, got["instance"], in.Name)
		}
		t.Logf("%s answers on %s:%d: %v", in.Name, in.Address, helloPort, got)
	}

	// A provider made afresh on the data directory (herd up restarted) finds both, Ready.
	again, err := local.New(local.Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := again.List(ctx, provider.ListOptions{Fleet: "itest"})
	if err != nil || len(listed) != 2 {
		t.Fatalf("List from a new provider: %+v, %v", listed, err)
	}
	for _, in := range listed {
		if in.State != provider.StateReady || in.Labels["herd.dev/revision"] != "itest-1" {
			t.Errorf("a new provider sees %+v", in)
		}
	}

	kubectl, err := kubebin.Path("kubectl")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range created {
		kubeconfig := filepath.Join(p.InstanceDir(in.Name), "agent", "kubeconfig")
		if fi, err := os.Stat(kubeconfig); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("kubeconfig %s: %v, %v (want mode 0600)", kubeconfig, fi, err)
		}
		out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "--no-headers").CombinedOutput()
		if err != nil {
			t.Fatalf("kubectl get nodes of %s: %v: %s", in.Name, err, out)
		}
		fields := strings.Fields(string(out))
		if len(fields) < 2 || fields[1] != "Ready" {
			t.Errorf("kubectl get nodes of %s: %q, want one Ready node", in.Name, out)
		}
	}

	// kill -9 every process of a: the provider reports it Failed with a reason.
	_, _, rootA := local.HostNames(a)
	killed := 0
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids, err := localtest.CgroupPIDs(rootA)
		if err != nil {
			t.Fatal(err)
		}
		if len(pids) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes of %s survive kill -9: %v", a, pids)
		}
		for _, pid := range pids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("killed %d processes of %s", killed, a)
	failed := providertest.WaitForState(t, p, a, provider.StateFailed, 10*time.Second)
	if failed.Reason == "" {
		t.Error("a killed instance is Failed without a reason")
	}
	t.Logf("%s: %s", a, failed.Reason)
	if in, err := p.Get(ctx, b); err != nil || in.State != provider.StateReady {
		t.Errorf("killing %s disturbed %s: %+v, %v", a, b, in, err)
	}
	getApp(t, created[1].Address, 5*time.Second)

	// Delete leaves nothing of a behind, while b keeps running; then b goes with the bridge.
	if err := p.Delete(ctx, a); err != nil {
		t.Fatalf("Delete %s: %v", a, err)
	}
	left, err := localtest.Leftovers(owned(p, []string{p.InstanceDir(a)}, "", a))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range left {
		t.Errorf("left behind by %s: %s", a, l)
	}
	getApp(t, created[1].Address, 5*time.Second)
	start = time.Now()
	if err := p.Delete(ctx, b); err != nil {
		t.Fatalf("Delete %s: %v", b, err)
	}
	t.Logf("deleting the running %s took %s", b, time.Since(start).Round(time.Millisecond))
	if err := p.Delete(ctx, b); err != nil {
		t.Fatalf("second Delete %s: %v", b, err)
	}
	localtest.AssertClean(t, before, owned(p, []string{dataDir}, region, a, b))
}

// TestIntegrationConformance runs the provider conformance suite with real instances.
func TestIntegrationConformance(t *testing.T) {
	p, dataDir := realEnv(t)
	before := localtest.Take(t)
	// Registered first, so it runs after the suite's own cleanup has deleted its instances.
	t.Cleanup(func() {
		dumpOnFailure(t, p, "conf-a-1")
		localtest.AssertClean(t, before, owned(p, []string{dataDir}, "r1", "conf-a-1", "conf-b-1"))
	})
	providertest.Run(t, func(t *testing.T) provider.Provider { return p }, providertest.Options{
		Image:        "hello",
		ReadyTimeout: readyTimeout,
		AfterDelete: func(t *testing.T, in provider.Instance) {
			// The suite's other instance still runs in the region: check this one only.
			left, err := localtest.Leftovers(owned(p, []string{p.InstanceDir(in.Name)}, "", in.Name))
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range left {
				t.Errorf("left behind: %s", l)
			}
		},
	})
}
