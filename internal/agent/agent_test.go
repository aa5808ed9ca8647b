package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/agent/cgroups"
	"herd.dev/herd/internal/agent/distro"
	"herd.dev/herd/internal/agent/proc"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/image"
)

// The life-cycle tests run the agent against a fake distribution, without root: isolation is
// replaced by a no-op.
func init() {
	isolateFn = func(string, *slog.Logger) ([]cgroups.Hierarchy, error) { return nil, nil }
}

// fakeDistro starts fakeNodes.
type fakeDistro struct {
	name string
	node *fakeNode
	err  error
}

func (d *fakeDistro) Name() string { return d.name }
func (d *fakeDistro) Start(ctx context.Context, spec distro.Spec) (distro.Node, error) {
	if d.err != nil {
		return nil, d.err
	}
	spec.Step("fake started")
	return d.node, nil
}

type fakeNode struct {
	runtime, api, failed chan struct{}
	err                  error
	stopped              atomic.Bool
	imports              atomic.Int32
}

func newFakeNode() *fakeNode {
	return &fakeNode{runtime: make(chan struct{}), api: make(chan struct{}), failed: make(chan struct{})}
}

func (n *fakeNode) RuntimeReady() <-chan struct{} { return n.runtime }
func (n *fakeNode) APIReady() <-chan struct{}     { return n.api }
func (n *fakeNode) ImportImage(context.Context, string, string) error {
	n.imports.Add(1)
	return nil
}
func (n *fakeNode) Access() distro.Access   { return distro.Access{} }
func (n *fakeNode) Failed() <-chan struct{} { return n.failed }
func (n *fakeNode) Err() error {
	select {
	case <-n.failed:
		return n.err
	default:
		return nil
	}
}
func (n *fakeNode) Stop(context.Context) error { n.stopped.Store(true); return nil }

// makeBundle writes a bundle with the given manifests (file name -> content) and distribution.
func makeBundle(t *testing.T, dist string, manifests map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	cfg := image.Config{
		SchemaVersion: image.SchemaVersion,
		Name:          "test",
		PauseImage:    image.PauseImage,
		Images:        []image.ImageRecord{},
	}
	cfg.Kubernetes.Distribution = dist
	if err := os.MkdirAll(filepath.Join(dir, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range manifests {
		file := "manifests/" + name
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(content))
		cfg.Manifests = append(cfg.Manifests, image.FileRecord{File: file, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(content))})
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, image.ConfigFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

const okManifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n"

type run struct {
	cfg  Config
	done chan error
	stop context.CancelFunc
}

func startRun(t *testing.T, d distro.Distro, bundle string, edit func(*Config)) *run {
	t.Helper()
	cfg := Config{
		Name:       "web-1",
		BundleDir:  bundle,
		StateDir:   filepath.Join(t.TempDir(), "agent"),
		Address:    netip.MustParseAddr("127.0.0.1"),
		Port:       freeport.TCP(t),
		Credential: testCredential,
		Distros:    map[string]distro.Distro{"upstream": d},
	}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{cfg: cfg, done: make(chan error, 1), stop: cancel}
	go func() { r.done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Error("the agent did not return")
		}
	})
	return r
}

func (r *run) wait(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.done:
		r.done <- err // for Cleanup
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("the agent did not return")
		return nil
	}
}

func (r *run) status(t *testing.T) Status {
	t.Helper()
	st, err := ReadStatus(filepath.Join(r.cfg.StateDir, StatusFile))
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func (r *run) get(path string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", r.cfg.Port, path), nil)
	if err != nil {
		return 0, "", err
	}
	verify := agentauth.Authorize(req, r.cfg.Credential)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if err := verify(resp); err != nil {
		return 0, "", err
	}
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// waitLive waits until /livez answers, with the credential.
func (r *run) waitLive(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, _, err := r.get("/livez")
		if err == nil && code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("/livez never answered: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunComponentExitFailsTheInstance(t *testing.T) {
	node := newFakeNode()
	node.err = &proc.ExitError{Name: "kube-apiserver", Err: errors.New("exit status 1"), LogTail: "E0101 etcd unreachable"}
	// The runtime never becomes ready: the failure is all the agent can react to, so the steps
	// recorded are exactly those before it.
	close(node.failed)
	r := startRun(t, &fakeDistro{name: "upstream", node: node}, makeBundle(t, "upstream", map[string]string{"a.yaml": okManifest}), nil)
	err := r.wait(t)
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver") {
		t.Fatalf("Run = %v, want an error naming kube-apiserver", err)
	}
	st := r.status(t)
	if st.Phase != PhaseFailed || !strings.Contains(st.Reason, "kube-apiserver exit status 1") || !strings.Contains(st.Reason, "etcd unreachable") {
		t.Errorf("status = %+v", st)
	}
	if !node.stopped.Load() {
		t.Error("the node was not stopped")
	}
	var names []string
	for _, s := range st.Steps {
		names = append(names, s.Name)
	}
	if strings.Join(names, ",") != "isolated,bundle verified,fake started" {
		t.Errorf("steps = %v", names)
	}
}

func TestRunStopDuringBoot(t *testing.T) {
	node := newFakeNode()
	r := startRun(t, &fakeDistro{name: "upstream", node: node}, makeBundle(t, "upstream", map[string]string{"a.yaml": okManifest}), nil)
	// While booting: live, not ready.
	r.waitLive(t)
	code, body, err := r.get("/readyz")
	if err != nil || code != http.StatusServiceUnavailable || !strings.Contains(body, "booting") {
		t.Errorf("/readyz while booting = %d %q %v", code, body, err)
	}
	code, body, err = r.get("/metrics")
	if err != nil || code != http.StatusOK || !strings.Contains(body, "herd_agent_ready 0") {
		t.Errorf("/metrics = %d %v:\n%s", code, err, body)
	}
	if st := r.status(t); st.Phase != PhaseBooting {
		t.Errorf("status while booting = %+v", st)
	}
	r.stop()
	if err := r.wait(t); err != nil {
		t.Fatalf("Run after a stop = %v, want nil", err)
	}
	if st := r.status(t); st.Phase != PhaseStopped {
		t.Errorf("status = %+v, want Stopped", st)
	}
	if !node.stopped.Load() {
		t.Error("the node was not stopped")
	}
}

func TestRunReadyTimeout(t *testing.T) {
	node := newFakeNode()
	close(node.runtime)
	r := startRun(t, &fakeDistro{name: "upstream", node: node}, makeBundle(t, "upstream", map[string]string{"a.yaml": okManifest}),
		func(c *Config) { c.ReadyTimeout = 300 * time.Millisecond })
	if err := r.wait(t); err == nil {
		t.Fatal("Run = nil, want a timeout")
	}
	st := r.status(t)
	if st.Phase != PhaseFailed || !strings.Contains(st.Reason, "API server ready not within --ready-timeout 300ms") {
		t.Errorf("status = %+v", st)
	}
}

// TestRunImagesPreloaded: with the images preloaded, a bundle without its image tars passes the
// check and nothing is imported; without, the missing tar fails the instance.
func TestRunImagesPreloaded(t *testing.T) {
	dir := makeBundle(t, "upstream", map[string]string{"a.yaml": okManifest})
	data, err := os.ReadFile(filepath.Join(dir, image.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var cfg image.Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	cfg.Images = append(cfg.Images, image.ImageRecord{Ref: "hello:v1", File: "images/0-hello-v1.tar", Digest: "sha256:" + strings.Repeat("0", 64), Size: 1})
	if data, err = json.Marshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, image.ConfigFile), data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, preloaded := range []bool{true, false} {
		node := newFakeNode()
		close(node.runtime)
		r := startRun(t, &fakeDistro{name: "upstream", node: node}, dir, func(c *Config) {
			c.ImagesPreloaded, c.ReadyTimeout = preloaded, 300*time.Millisecond
		})
		if err := r.wait(t); err == nil {
			t.Fatal("Run = nil, want a failure")
		}
		st := r.status(t)
		want := "API server ready not within" // past the bundle's check
		if !preloaded {
			want = "images/0-hello-v1.tar"
		}
		if st.Phase != PhaseFailed || !strings.Contains(st.Reason, want) {
			t.Errorf("preloaded %v: status %+v, want Failed with %q", preloaded, st, want)
		}
		if n := node.imports.Load(); n != 0 {
			t.Errorf("preloaded %v: %d images imported, want none", preloaded, n)
		}
	}
}

func TestRunRefusesBadBundles(t *testing.T) {
	tests := []struct {
		name   string
		bundle func(t *testing.T) string
		want   []string
	}{
		{"unknown distribution", func(t *testing.T) string { return makeBundle(t, "k3s", map[string]string{"a.yaml": okManifest}) },
			[]string{`distribution "k3s"`, "it has: upstream"}},
		{"invalid manifest", func(t *testing.T) string {
			return makeBundle(t, "upstream", map[string]string{"a.yaml": "apiVersion: v1\nmetadata: {name: x}\n"})
		}, []string{"manifests/a.yaml: document 1: kind is missing"}},
		{"corrupt bundle", func(t *testing.T) string {
			dir := makeBundle(t, "upstream", map[string]string{"a.yaml": okManifest})
			if err := os.WriteFile(filepath.Join(dir, "manifests/a.yaml"), []byte("changed"), 0o644); err != nil {
				t.Fatal(err)
			}
			return dir
		}, []string{"corrupt"}},
		{"not a bundle", func(t *testing.T) string { return t.TempDir() }, []string{"is --bundle a node image bundle directory?"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeDistro{name: "upstream", err: errors.New("must not start")}
			r := startRun(t, d, tt.bundle(t), nil)
			err := r.wait(t)
			if err == nil {
				t.Fatal("Run = nil")
			}
			st := r.status(t)
			if st.Phase != PhaseFailed {
				t.Errorf("phase = %s", st.Phase)
			}
			for _, w := range tt.want {
				if !strings.Contains(st.Reason, w) {
					t.Errorf("reason %q does not contain %q", st.Reason, w)
				}
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	valid := Config{Name: "web-1", BundleDir: "/b", StateDir: "/s", Address: netip.MustParseAddr("10.0.0.1"), CgroupRoot: "/herd-web-1", Credential: testCredential}
	c, err := valid.withDefaults()
	if err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if c.Port != DefaultPort || c.ReadyTimeout != DefaultReadyTimeout || c.StopTimeout != DefaultStopTimeout || c.Distros["upstream"] == nil {
		t.Errorf("defaults = %+v", c)
	}
	tests := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"bad name", func(c *Config) { c.Name = "Web_1" }, "--name"},
		{"no bundle", func(c *Config) { c.BundleDir = "" }, "--bundle is required"},
		{"no state dir", func(c *Config) { c.StateDir = "" }, "--state-dir is required"},
		{"no address", func(c *Config) { c.Address = netip.Addr{} }, "--address is required"},
		{"relative cgroup root", func(c *Config) { c.CgroupRoot = "herd-web-1" }, "--cgroup-root"},
		{"root cgroup", func(c *Config) { c.CgroupRoot = "/" }, "--cgroup-root"},
		{"unclean cgroup root", func(c *Config) { c.CgroupRoot = "/a/../b" }, "--cgroup-root"},
		{"no credential", func(c *Config) { c.Credential = "" }, "--credential-file is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.edit(&c)
			if _, err := c.withDefaults(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}
