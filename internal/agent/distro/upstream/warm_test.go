package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/agent/proc"
)

func TestReplaceFlags(t *testing.T) {
	got := replaceFlags([]string{"--a=1", "--b=2", "--bb=3"}, map[string]string{"--b": "x", "--d": "4", "--c": "5"})
	want := []string{"--a=1", "--b=x", "--bb=3", "--c=5", "--d=4"}
	if !slices.Equal(got, want) {
		t.Errorf("replaceFlags = %v, want %v", got, want)
	}
}

func TestTrimWAL(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want int
	}{
		{append(bytes.Repeat([]byte{1}, 13), make([]byte, 100)...), 16},
		{append(bytes.Repeat([]byte{1}, 16), make([]byte, 100)...), 16},
		{bytes.Repeat([]byte{1}, 13), 13}, // never past the end
		{make([]byte, 64), 0},
	} {
		if got := len(trimWAL(tc.in)); got != tc.want {
			t.Errorf("trimWAL(%d bytes) kept %d, want %d", len(tc.in), got, tc.want)
		}
	}
}

func TestSeedStoreKeepsAnExistingStore(t *testing.T) {
	src, dst := t.TempDir(), t.TempDir()
	for dir, content := range map[string]string{src: "warm", dst: "own"} {
		if err := os.MkdirAll(filepath.Join(dir, "member", "snap"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "member", "snap", "db"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := seedStore(src, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "member", "snap", "db")); string(got) != "own" {
		t.Errorf("a node's own store was replaced by the warm store: db = %q", got)
	}
	fresh := filepath.Join(t.TempDir(), "etcd")
	if err := seedStore(src, fresh); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(fresh, "member", "snap", "db")); string(got) != "warm" {
		t.Errorf("a new node's store is %q, want the warm store's", got)
	}
}

// TestSeedStoreCutShort checks that a seed that fails part way leaves the node no store, and
// that the next start seeds it whole.
func TestSeedStoreCutShort(t *testing.T) {
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "member", "snap"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "member", "snap", "db"), []byte("warm"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file the copy cannot read, walked after member/snap/db: the copy fails part way.
	broken := filepath.Join(src, "member", "wal")
	if err := os.Symlink(filepath.Join(src, "missing"), broken); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(t.TempDir(), "etcd")
	if err := os.Mkdir(dst, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := seedStore(src, dst); err == nil {
		t.Fatal("seedStore: no error from a copy that could not read a file")
	}
	if _, err := os.Stat(filepath.Join(dst, "member")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed seed left a store behind (stat member: %v)", err)
	}
	if err := os.Remove(broken); err != nil {
		t.Fatal(err)
	}
	if err := seedStore(src, dst); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "member", "snap", "db")); string(got) != "warm" {
		t.Errorf("after a failed seed, the next seed gave db = %q, want the warm store's", got)
	}
	if _, err := os.Stat(dst + ".seeding"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy's directory is left beside the store (stat: %v)", err)
	}
}

// TestIntegrationWarmStore makes a warm store with the real etcd and API server, seeds a new
// node's data directory from it and starts etcd there, as an instance does: the bootstrap objects
// are in it, what named the build's API server is not, and the store takes writes.
func TestIntegrationWarmStore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	etcdBin, err := exec.LookPath("etcd")
	if err != nil {
		t.Fatalf("etcd: %v (make deps)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	warm := t.TempDir()
	if err := MakeWarmStore(ctx, warm, nil); err != nil {
		t.Fatal(err)
	}
	wal, _ := filepath.Glob(filepath.Join(warm, "member", "wal", "*.wal"))
	if len(wal) == 0 {
		t.Fatal("the warm store has no write-ahead log")
	}
	if fi, err := os.Stat(wal[0]); err != nil || fi.Size() >= 64e6 {
		t.Errorf("the write-ahead log is kept with its preallocated tail: %v %v", fi.Size(), err)
	}
	if snaps, _ := filepath.Glob(filepath.Join(warm, "member", "snap", "*.snap")); len(snaps) == 0 {
		t.Error("the warm store holds no raft snapshot")
	}

	state := t.TempDir()
	c := nodeConfig{name: "node-a", address: warmBuildAddress, l: layout{state: state}}
	if err := seedStore(warm, c.l.etcdData()); err != nil {
		t.Fatal(err)
	}
	ports, err := freePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	p, err := proc.Start(proc.Spec{Name: "etcd", Path: etcdBin, LogDir: c.l.logs(), Args: replaceFlags(etcdArgs(c), map[string]string{
		"--listen-client-urls": url, "--advertise-client-urls": url, "--listen-peer-urls": "http://127.0.0.1:" + strconv.Itoa(ports[1]),
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(5 * time.Second)
	err = wait.PollUntilContextCancel(ctx, 50*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		if ee, ok := p.Unexpected(); ok {
			return false, ee
		}
		return httpOK(ctx, http.DefaultClient, url+"/health", "", time.Second), nil
	})
	if err != nil {
		t.Fatalf("etcd on the warm store: %v", err)
	}
	// From its snapshot, the member knows it is the cluster's only one, and elects itself
	// without waiting out its election timeout.
	if log, err := os.ReadFile(filepath.Join(c.l.logs(), "etcd.log")); err != nil || !bytes.Contains(log, []byte("fast-forwarding")) {
		t.Errorf("etcd on the warm store did not fast-forward its election ticks as a single member (read log: %v)", err)
	}
	for key, want := range map[string]bool{
		"/registry/clusterroles/cluster-admin":                                true,
		"/registry/clusterrolebindings/system:kube-controller-manager":        true,
		"/registry/priorityclasses/system-node-critical":                      true,
		"/registry/namespaces/kube-system":                                    true,
		"/registry/flowschemas/system-nodes":                                  true,
		"/registry/services/specs/default/kubernetes":                         true,
		"/registry/serviceaccounts/default/default":                           true,
		"/registry/serviceaccounts/kube-system/default":                       true,
		"/registry/serviceaccounts/kube-system/replicaset-controller":         true,
		"/registry/serviceaccounts/kube-system/bootstrap-signer":              true, // a role binding's
		"/registry/configmaps/default/kube-root-ca.crt":                       false,
		"/registry/configmaps/kube-system/extension-apiserver-authentication": false,
	} {
		if got := etcdCount(t, url, key, false) > 0; got != want {
			t.Errorf("%s in the warm store: %v, want %v", key, got, want)
		}
	}
	if n := etcdCount(t, url, buildOnlyKeys[0], true); n != 0 {
		t.Errorf("the build's API server's identity leases are in the warm store: %d", n)
	}
	if n := etcdCount(t, url, "/registry/services/endpoints/", true); n != 0 {
		t.Errorf("the warm store holds %d Endpoints naming the build's API server", n)
	}
	put, _ := json.Marshal(map[string][]byte{"key": []byte("/test/written"), "value": []byte("x")})
	resp, err := http.Post(url+"/v3/kv/put", "application/json", bytes.NewReader(put))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a write to the seeded store: %v %v", resp, err)
	}
	resp.Body.Close()
	if etcdCount(t, url, "/test/written", false) != 1 {
		t.Error("the write to the seeded store is not read back")
	}
}

// etcdCount returns how many keys etcd at url has under key (all those it prefixes, if prefix).
func etcdCount(t *testing.T, url, key string, prefix bool) int {
	t.Helper()
	q := map[string]any{"key": []byte(key), "count_only": true}
	if prefix {
		q["range_end"] = prefixEnd(key)
	}
	body, _ := json.Marshal(q)
	resp, err := http.Post(url+"/v3/kv/range", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Count string `json:"count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(r.Count)
	return n
}
