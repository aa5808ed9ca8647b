// The warm store: an etcd data directory, made when a node image is built, that already holds
// what the API server writes when it first starts (the default RBAC policy, the system priority
// classes, API Priority and Fairness' configuration, the system namespaces, the kubernetes
// Service and its cluster IP's allocation) and the service accounts kube-controller-manager makes
// as it starts (writeServiceAccounts). An instance whose etcd starts from it has its API
// server's bootstrap hooks find their objects in place: reads instead of a write (and an fsync)
// each, and nothing its other components must wait for.

package upstream

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/agent/proc"
	"herd.dev/herd/internal/kubebin"
)

// warmBuildAddress is the address the API server advertises while it fills a warm store. It
// writes no object that names it (endpoint reconciler none), so any address outside the
// instance's ranges does; this one is TEST-NET-1 (RFC 5737).
var warmBuildAddress = netip.MustParseAddr("192.0.2.1")

// buildOnlyKeys are the etcd key prefixes of what the API server that fills a warm store writes
// about itself rather than the cluster: its identity lease (which would stand for an hour as a
// second API server's). They are deleted before the store is kept.
var buildOnlyKeys = []string{
	"/registry/leases/kube-system/apiserver-",
	"/registry/configmaps/kube-system/extension-apiserver-authentication",
}

// warmTimeout bounds the making of a warm store.
const warmTimeout = 2 * time.Minute

// MakeWarmStore writes into dir (created, or empty) the etcd data directory of a new node whose
// API server has started once and is ready: a store with the cluster's bootstrap objects and
// nothing of any instance's identity (certificates, tokens, node name, address), which the node
// makes at boot. It runs etcd and the API server of this herd's Kubernetes on loopback ports
// free at the time, and stops them before it returns.
func MakeWarmStore(ctx context.Context, dir string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithTimeout(ctx, warmTimeout)
	defer cancel()
	etcdBin, err := exec.LookPath("etcd")
	if err != nil {
		return errors.New("etcd not found on PATH: run make deps (hack/install-deps.sh)")
	}
	api, err := apiServerCommand()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "herd-warm-store-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	c := nodeConfig{name: "warm", address: warmBuildAddress, l: layout{state: tmp}}
	for _, d := range c.l.dirs() {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	adm, err := writeCredentials(c)
	if err != nil {
		return err
	}
	admin, err := adminClient(adm)
	if err != nil {
		return err
	}
	defer admin.CloseIdleConnections()
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	clientURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	etcdSpec := proc.Spec{Name: "etcd", Path: etcdBin, LogDir: c.l.logs(), Args: replaceFlags(etcdArgs(c), map[string]string{
		"--listen-client-urls":    clientURL,
		"--advertise-client-urls": clientURL,
		// The member keeps the peer address every instance's etcd has (so its member ID too)
		// while it listens elsewhere.
		"--listen-peer-urls": "http://127.0.0.1:" + strconv.Itoa(ports[1]),
		// A raft snapshot in the store (warmSnapshotCount).
		"--snapshot-count": strconv.Itoa(warmSnapshotCount),
	})}
	etcd, err := proc.Start(etcdSpec)
	if err != nil {
		return err
	}
	defer etcd.Stop(5 * time.Second)
	apiArgs := replaceFlags(apiServerArgs(c), map[string]string{
		"--bind-address": "127.0.0.1",
		"--secure-port":  strconv.Itoa(ports[2]),
		"--etcd-servers": clientURL,
		// Neither the kubernetes Service's endpoints nor the API servers' leases behind them
		// name the build's address: each instance's API server writes its own.
		"--endpoint-reconciler-type": "none",
	})
	apiserver, err := proc.Start(proc.Spec{Name: "kube-apiserver", Path: api[0], LogDir: c.l.logs(),
		Args: append(api[1:], apiArgs...), Env: []string{"GOGC=" + componentGOGC}})
	if err != nil {
		return err
	}
	defer apiserver.Stop(5 * time.Second)
	base := "https://127.0.0.1:" + strconv.Itoa(ports[2])
	err = wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		for _, p := range []*proc.Process{etcd, apiserver} {
			if ee, ok := p.Unexpected(); ok {
				return false, ee
			}
		}
		// The kubernetes Service is made by a controller of the API server that /readyz does not
		// wait for: stopped while it writes, the store could hold its cluster IP's allocation
		// without it.
		return httpOK(ctx, admin, base+"/readyz", adm.Token, time.Second) &&
			httpOK(ctx, admin, base+"/api/v1/namespaces/default/services/kubernetes", adm.Token, time.Second), nil
	})
	if err != nil {
		return fmt.Errorf("the API server was not ready: %w", err)
	}
	log.Debug("warm store: API server ready")
	if err := writeServiceAccounts(ctx, base, adm); err != nil {
		return err
	}
	apiserver.Stop(10 * time.Second)
	if err := deleteBuildOnlyKeys(ctx, clientURL); err != nil {
		return err
	}
	etcd.Stop(10 * time.Second)
	if ee, ok := etcd.Unexpected(); ok {
		return ee
	}
	if snaps, _ := filepath.Glob(filepath.Join(c.l.etcdData(), "member", "snap", "*.snap")); len(snaps) == 0 {
		return fmt.Errorf("warm store: etcd took no snapshot (--snapshot-count=%d); an instance's etcd would wait a whole election timeout before it serves", warmSnapshotCount)
	}
	return copyStore(c.l.etcdData(), dir)
}

// warmSnapshotCount is the --snapshot-count of the etcd that fills a warm store: a raft snapshot
// every few entries, so that the store holds one. etcd learns its members, when it restarts, from
// its latest snapshot; without one it knows none until it has replayed its log, and does not take
// itself for a single member. A single member fast-forwards its election ticks at start and elects
// itself within 1 to 5 ticks (etcdArgs); a restarted member that does not know it is alone waits
// its whole randomized election timeout, 5 to 9 ticks: an instance's etcd, started from a store
// without a snapshot, served 0.6-0.85 s after its start; with one, 0.2-0.4 s.
const warmSnapshotCount = 10

// apiServerCommand is the command that runs kube-apiserver alone: its own binary, or
// kube-combined with the API server as its one component.
func apiServerCommand() ([]string, error) {
	if p, err := kubebin.Path("kube-apiserver"); err == nil {
		return []string{p}, nil
	}
	p, err := kubebin.Path(combinedName)
	if err != nil {
		return nil, err
	}
	return []string{p, "kube-apiserver"}, nil
}

// deleteBuildOnlyKeys deletes buildOnlyKeys from the etcd at url, through its JSON gateway (the
// etcd client would link gRPC into every instance's agent, for one call at image build).
func deleteBuildOnlyKeys(ctx context.Context, url string) error {
	for _, p := range buildOnlyKeys {
		body, err := json.Marshal(map[string][]byte{"key": []byte(p), "range_end": prefixEnd(p)})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v3/kv/deleterange", bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("deleting %s*: %w", p, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("deleting %s*: etcd answered %s", p, resp.Status)
		}
	}
	return nil
}

// prefixEnd is the end of the range of keys that start with prefix (etcd's range_end): the
// prefix with its last byte incremented.
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	end[len(end)-1]++
	return end
}

// freePorts returns n loopback TCP ports that were free a moment ago.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// replaceFlags returns args with the value of each "--name=value" flag whose name is in values
// replaced, and the names args lacks appended.
func replaceFlags(args []string, values map[string]string) []string {
	out := make([]string, 0, len(args)+len(values))
	seen := map[string]bool{}
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		if v, ok := values[name]; ok {
			a = name + "=" + v
			seen[name] = true
		}
		out = append(out, a)
	}
	for _, name := range slices.Sorted(maps.Keys(values)) {
		if !seen[name] {
			out = append(out, name+"="+values[name])
		}
	}
	return out
}

// copyStore copies the etcd data directory src into dst, each write-ahead log without its
// preallocated tail: etcd makes each log file 64 MB of zeros ahead of its records, reads a log up
// to its last record, and preallocates the files it starts next itself.
func copyStore(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o700)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if filepath.Ext(path) == ".wal" {
			data = trimWAL(data)
		}
		return os.WriteFile(target, data, 0o600)
	})
}

// trimWAL returns an etcd write-ahead log file's data up to the end of its last record: records
// are padded to 8 bytes and end in data that is not all zeros (a CRC and the record's bytes).
func trimWAL(data []byte) []byte {
	n := len(bytes.TrimRight(data, "\x00"))
	return data[:min(len(data), (n+7)/8*8)]
}

// warmStoreFormat changes when what MakeWarmStore keeps changes, so that a cached store made
// before is made again.
const warmStoreFormat = 3

// WarmStore returns the directory of this herd's warm store on this machine, making it with
// MakeWarmStore the first time: <herd's cache>/kubernetes/<version>/warm-store-<hash>, the hash
// of the etcd and API server flags that shape it. A store holds UIDs and times of its own, so
// the one made once per machine is what keeps the same inputs building the same bundle there.
func WarmStore(ctx context.Context, log *slog.Logger) (string, error) {
	bin, err := kubebin.BinDir()
	if err != nil {
		return "", fmt.Errorf("warm store: %w", err)
	}
	c := nodeConfig{name: "warm", address: warmBuildAddress, l: layout{state: "/"}}
	h := sha256.New()
	fmt.Fprintln(h, warmStoreFormat, kubebin.Version, etcdArgs(c), apiServerArgs(c), buildOnlyKeys)
	dir := filepath.Join(filepath.Dir(bin), "warm-store-"+hex.EncodeToString(h.Sum(nil))[:12])
	if _, err := os.Stat(filepath.Join(dir, "member")); err == nil {
		return dir, nil
	}
	tmp, err := os.MkdirTemp(filepath.Dir(bin), ".warm-store-")
	if err != nil {
		return "", fmt.Errorf("warm store: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := MakeWarmStore(ctx, tmp, log); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "member")); serr == nil {
			return dir, nil // another build made it meanwhile
		}
		return "", fmt.Errorf("warm store: %w", err)
	}
	return dir, nil
}

// seedStore copies the warm store at src into the etcd data directory dst unless dst holds a
// store already (a restarted node keeps its own). The copy is made beside dst and renamed into
// place, so that a copy cut short (the agent killed, the disk full) leaves no partial store that
// the node's next start would take for its own.
func seedStore(src, dst string) error {
	if _, err := os.Stat(filepath.Join(dst, "member")); err == nil {
		return nil
	}
	tmp := dst + ".seeding"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("upstream: removing a cut-short copy of the warm store: %w", err)
	}
	if err := copyStore(src, tmp); err != nil {
		os.RemoveAll(tmp)
		return fmt.Errorf("upstream: copying the warm store: %w", err)
	}
	// The node's layout makes dst as an empty directory; one that holds anything else is left
	// alone, and the error says so.
	if err := os.Remove(dst); err != nil && !errors.Is(err, os.ErrNotExist) {
		os.RemoveAll(tmp)
		return fmt.Errorf("upstream: seeding %s from the warm store: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("upstream: seeding %s from the warm store: %w", dst, err)
	}
	return nil
}
