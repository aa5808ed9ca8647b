package controlplane_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
)

// herdBinary builds the herd command once per test binary run.
var herdBinary string

func TestMain(m *testing.M) {
	code := m.Run()
	if herdBinary != "" {
		os.RemoveAll(filepath.Dir(herdBinary))
	}
	os.Exit(code)
}

func buildHerd(t *testing.T) string {
	t.Helper()
	if herdBinary != "" {
		return herdBinary
	}
	dir, err := os.MkdirTemp("", "herd-bin-")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "herd")
	out, err := exec.Command("go", "build", "-o", bin, "herd.dev/herd/cmd/herd").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	herdBinary = bin
	return bin
}

// cluster is one `herd up --provider fake` process with its own data dir and client config.
type cluster struct {
	t       *testing.T
	bin     string
	dir     string
	addr    string
	cmd     *exec.Cmd
	logFile *os.File
}

func newCluster(t *testing.T) *cluster {
	bin := buildHerd(t)
	dir := t.TempDir()
	// A fixed free port, so that the client config stays valid across restarts.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return &cluster{t: t, bin: bin, dir: dir, addr: addr}
}

func (c *cluster) herd(args ...string) (string, error) {
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(c.dir, "config"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c *cluster) up() {
	c.t.Helper()
	f, err := os.OpenFile(filepath.Join(c.dir, "up.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		c.t.Fatal(err)
	}
	c.logFile = f
	c.cmd = exec.Command(c.bin, "up", "--provider", "fake", "--data-dir", filepath.Join(c.dir, "data"), "--listen", c.addr)
	c.cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(c.dir, "config"))
	c.cmd.Stdout, c.cmd.Stderr = f, f
	if err := c.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { c.kill(syscall.SIGKILL) })
	c.waitFor(10*time.Second, func() string {
		if _, err := c.herd("get", "fleets"); err != nil {
			return err.Error()
		}
		return ""
	})
}

func (c *cluster) kill(sig syscall.Signal) {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	_ = c.cmd.Process.Signal(sig)
	_ = c.cmd.Wait()
	c.cmd = nil
	c.logFile.Close()
}

func (c *cluster) waitFor(timeout time.Duration, cond func() string) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		if last = cond(); last == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(c.dir, "up.log"))
	c.t.Fatalf("not met after %s: %s\nherd up log:\n%s", timeout, last, log)
}

// providerInstances lists the fake provider's instance files: what "really" exists.
func (c *cluster) providerInstances() []string {
	files, _ := filepath.Glob(filepath.Join(c.dir, "data", "providers", "fake", "*.json"))
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	sort.Strings(names)
	return names
}

func (c *cluster) instances() []v1alpha1.Instance {
	out, err := c.herd("get", "instances", "-o", "json")
	if err != nil {
		return nil
	}
	var list []v1alpha1.Instance
	_ = json.Unmarshal([]byte(out), &list)
	return list
}

// desired returns a fleet's spec.replicas.desired, or -1 if it cannot be read.
func (c *cluster) desired(fleet string) int32 {
	out, err := c.herd("get", "fleets", fleet, "-o", "json")
	if err != nil {
		return -1
	}
	var f v1alpha1.Fleet
	if json.Unmarshal([]byte(out), &f) != nil || f.Spec.Replicas.Desired == nil {
		return -1
	}
	return *f.Spec.Replicas.Desired
}

// apply writes manifest to fleet.yaml in the cluster's directory and applies it.
func (c *cluster) apply(manifest string) {
	c.t.Helper()
	path := writeFile(c.t, c.dir, "fleet.yaml", manifest)
	if out, err := c.herd("apply", "-f", path); err != nil {
		c.t.Fatalf("apply: %v\n%s", err, out)
	}
}

func writeFile(t *testing.T, dir, name, content string) string {
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestIntegrationKillDuringScaleUp kills `herd up` with SIGKILL while it is creating instances,
// restarts it, and checks that exactly the desired instances exist: none orphaned, none doubled.
func TestIntegrationKillDuringScaleUp(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	const desired = 60
	c := newCluster(t)
	c.up()
	// createDelay slows every Create so that the kill lands in the middle of the scale-up.
	c.apply(fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: web}
spec:
  image: hello
  replicas: {min: 1, max: 100, desired: %d}
  regions: [{name: local, options: {createDelay: 40ms, bootDelay: 200ms}}]
`, desired))
	c.waitFor(10*time.Second, func() string {
		if n := len(c.providerInstances()); n < 5 {
			return fmt.Sprintf("%d instances created so far", n)
		}
		return ""
	})
	c.kill(syscall.SIGKILL)
	before := len(c.providerInstances())
	if before >= desired {
		t.Fatalf("the scale-up finished before the kill (%d instances): nothing was tested", before)
	}
	t.Logf("killed herd up with %d of %d instances created", before, desired)

	c.up()
	c.waitFor(30*time.Second, func() string {
		insts := c.instances()
		ready := 0
		for _, in := range insts {
			if in.Status.Phase == v1alpha1.PhaseReady {
				ready++
			}
		}
		if ready != desired || len(insts) != desired {
			return fmt.Sprintf("%d records, %d ready, want %d", len(insts), ready, desired)
		}
		return ""
	})
	var recorded []string
	for _, in := range c.instances() {
		recorded = append(recorded, in.Metadata.Name)
	}
	sort.Strings(recorded)
	actual := c.providerInstances()
	if strings.Join(recorded, ",") != strings.Join(actual, ",") {
		t.Fatalf("records and provider instances differ:\nrecords:  %v\nprovider: %v", recorded, actual)
	}
	if len(actual) != desired {
		t.Fatalf("%d provider instances, want exactly %d", len(actual), desired)
	}
}

// TestIntegrationCLIErrors checks what a user sees for bad files and a stopped control plane.
func TestIntegrationCLIErrors(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	c := newCluster(t)
	bad := writeFile(t, c.dir, "bad.yaml", `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: Web}
spec:
  replicas: {min: 5, max: 3}
  healthCheck: {interval: 1s, timeout: 2s}
`)
	good := writeFile(t, c.dir, "good.yaml", "apiVersion: herd.dev/v1alpha1\nkind: Fleet\nmetadata: {name: web}\nspec: {image: hello}\n")

	out, err := c.herd("apply", "-f", good)
	if err == nil || !strings.Contains(out, "herd up") {
		t.Fatalf("apply with no control plane: err %v, output %q; want a hint to run herd up", err, out)
	}

	c.up()
	out, err = c.herd("apply", "-f", bad)
	if err == nil {
		t.Fatal("apply of an invalid file succeeded")
	}
	for _, want := range []string{"metadata.name: must be a DNS label", "spec.image: required", "spec.replicas.min: must be <= spec.replicas.max (got 5 > 3)", "spec.healthCheck.interval: must be >= spec.healthCheck.timeout", "nothing was applied"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if out, _ := c.herd("get", "fleets", "-o", "json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("fleets stored after a refused apply: %s", out)
	}
	if out, err := c.herd("apply", "-f", good); err != nil || !strings.Contains(out, "fleet/web created") {
		t.Fatalf("apply good: %v %s", err, out)
	}

	// Ctrl-C stops herd up cleanly.
	c.kill(syscall.SIGINT)
	log, _ := os.ReadFile(filepath.Join(c.dir, "up.log"))
	if !strings.Contains(string(log), "msg=stopped") {
		t.Fatalf("herd up did not stop cleanly on SIGINT:\n%s", log)
	}
}
