package controlplane_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/kubebin"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store/etcd"
	"herd.dev/herd/internal/store/etcd/etcdcluster"
)

// replica is one in-process herd up of an HA test.
type replica struct {
	url    string
	api    *client.Client
	cancel context.CancelFunc
	done   chan error
}

// haReplicas runs n control planes in-process on the etcd cluster ec, sharing one provider (as
// replicas share a cloud account) and one client config, each logging to up-<i>.log in dir.
func haReplicas(t *testing.T, ec *etcdcluster.Cluster, prov provider.Provider, dir string, n int) []*replica {
	t.Helper()
	var out []*replica
	for i := range n {
		logFile, err := os.Create(filepath.Join(dir, fmt.Sprintf("up-%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		r := &replica{cancel: cancel, done: make(chan error, 1)}
		ready := make(chan string, 1)
		go func() {
			r.done <- controlplane.Run(ctx, controlplane.Options{
				DataDir: filepath.Join(dir, fmt.Sprintf("data-%d", i)), Listen: "127.0.0.1:0", Provider: fake.Name,
				NewProvider:    func(string, *slog.Logger) (provider.Provider, error) { return prov, nil },
				ConfigPath:     filepath.Join(dir, "config"),
				Store:          controlplane.StoreEtcd,
				Etcd:           etcd.Config{Endpoints: ec.Endpoints(), RequestTimeout: 2 * time.Second},
				LeaderLeaseTTL: 1,
				Logger:         slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelDebug})),
				Ready:          func(url string) { ready <- url },
			})
		}()
		t.Cleanup(func() {
			r.stop(t)
			logFile.Close()
		})
		select {
		case r.url = <-ready:
		case err := <-r.done:
			r.done <- err
			t.Fatalf("replica %d did not start: %v", i, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("replica %d did not serve within 30s", i)
		}
		r.api = client.New(&client.Config{Server: r.url, Token: readToken(t, dir)})
		out = append(out, r)
	}
	return out
}

func readToken(t *testing.T, dir string) string {
	t.Helper()
	cfg, err := client.LoadConfig(filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Token
}

func (r *replica) stop(t *testing.T) {
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	if err := <-r.done; err != nil {
		t.Errorf("replica %s: %v", r.url, err)
	}
}

// status asks a replica for /v1/status; nil when it does not answer.
func (r *replica) status() map[string]string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	st, err := r.api.Status(ctx)
	if err != nil {
		return nil
	}
	return st
}

// leaderOf waits until exactly one of rs says it leads, every one names it as the leader, and it
// has synced its controller; it returns its index.
func leaderOf(t *testing.T, rs []*replica, timeout time.Duration) int {
	t.Helper()
	return leaderOtherThan(t, rs, -1, timeout)
}

// leaderOtherThan waits until one replica other than old leads with its controller synced, every
// replica naming it, and returns it. Right after old lost its lease, old still says it leads
// until it notices: waiting for another replica tells a takeover from that stale view.
func leaderOtherThan(t *testing.T, rs []*replica, old int, timeout time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		leaders, names := []int{}, map[string]bool{}
		synced := false
		for i, r := range rs {
			if r.cancel == nil {
				continue
			}
			st := r.status()
			if st["role"] == "leader" {
				leaders = append(leaders, i)
				synced = st["controller"] == "synced"
			}
			names[st["leader"]] = true
		}
		if len(leaders) == 1 && leaders[0] != old && len(names) == 1 && synced {
			return leaders[0]
		}
		last = fmt.Sprintf("leaders %v, named %v, synced %v", leaders, names, synced)
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no single synced leader other than replica %d after %s: %s", old, timeout, last)
	return -1
}

// waitServing waits until fleet web has want Ready records, and returns them.
func waitServing(t *testing.T, api *client.Client, want int, timeout time.Duration) []v1alpha1.Instance {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ins, err := api.ListInstances(ctx, "web")
		cancel()
		ready := 0
		for _, in := range ins {
			if in.Status.Phase == v1alpha1.PhaseReady {
				ready++
			}
		}
		if err == nil && ready == want && len(ins) == want {
			return ins
		}
		last = fmt.Sprintf("%d records, %d ready, err %v", len(ins), ready, err)
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("after %s: %s; want %d ready", timeout, last, want)
	return nil
}

// sameAsProvider fails the test unless the provider runs exactly the recorded instances: no
// orphan (a provider instance without a record) and no duplicate.
func sameAsProvider(t *testing.T, prov provider.Provider, recs []v1alpha1.Instance) {
	t.Helper()
	running, err := prov.List(context.Background(), provider.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var have, want []string
	for _, in := range running {
		have = append(have, in.Name)
	}
	for _, in := range recs {
		want = append(want, in.Metadata.Name)
	}
	sort.Strings(have)
	sort.Strings(want)
	if strings.Join(have, ",") != strings.Join(want, ",") {
		t.Fatalf("provider instances and records differ:\nprovider: %v\nrecords:  %v", have, want)
	}
}

// fakeWeb is fleet web of the fake provider with desired instances.
func fakeWeb(desired int) string {
	return fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: web}
spec:
  image: hello
  replicas: {min: 1, max: 20, desired: %d}
  regions: [{name: local, provider: fake, options: {bootDelay: 50ms, createDelay: 20ms}}]
`, desired)
}

// countingProvider counts the creates each replica's controller asks for, by instance name.
type countingProvider struct {
	provider.Provider
	mu      sync.Mutex
	creates map[string]int
}

func (p *countingProvider) Create(ctx context.Context, spec provider.InstanceSpec) (provider.Instance, error) {
	p.mu.Lock()
	p.creates[spec.Name]++
	p.mu.Unlock()
	return p.Provider.Create(ctx, spec)
}

// TestIntegrationHAReplicas runs three herd up replicas on a real 3-member etcd with one shared
// fake provider. One leads, all agree which; when the leader loses its session (its lease is
// revoked, as when it is cut off or frozen past its TTL) another takes over, the old one stops
// acting, and a scale written through any replica is carried out by the new leader with no
// orphaned or doubled instance. A client whose first server is down uses the next.
func TestIntegrationHAReplicas(t *testing.T) {
	ec := etcdcluster.StartTest(t, etcdcluster.FastElection...)
	f, err := fake.New(fake.Options{BootDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	prov := &countingProvider{Provider: f, creates: map[string]int{}}
	dir := t.TempDir()
	rs := haReplicas(t, ec, prov, dir, 3)

	cfg, err := client.LoadConfig(filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	if got := len(cfg.Endpoints()); got != 3 {
		t.Fatalf("client config lists %d servers, want the 3 replicas: %+v", got, cfg)
	}
	api := client.New(cfg)
	lead := leaderOf(t, rs, 20*time.Second)
	t.Logf("replica %d leads: %v", lead, rs[lead].status())

	applyManifest(t, api, fakeWeb(3))
	sameAsProvider(t, prov, waitServing(t, api, 3, 30*time.Second))
	edgeStatsAddUp(t, rs, api)

	// The leader loses its lease: its session ends, as it would if it froze or was cut off.
	admin := ec.Client(t)
	resp, err := admin.Get(context.Background(), "/herd-leader/", clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("read the leader key: %v", err)
	}
	lost := time.Now()
	if _, err := admin.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	// Two others were waiting: one of them must take over, not the replica that lost its lease.
	next := leaderOtherThan(t, rs, lead, 10*time.Second)
	t.Logf("takeover after the leader lost its lease: %s (replica %d -> %d)", time.Since(lost).Round(time.Millisecond), lead, next)
	if st := rs[lead].status(); st["role"] != "follower" || st["controller"] != "standby" {
		t.Errorf("the replica that lost its lease says %v; want a follower with its controller on standby", st)
	}

	// A write through the old leader is carried out by the new one.
	if err := rs[lead].api.Scale(context.Background(), "web", 6); err != nil {
		t.Fatalf("scale through the former leader: %v", err)
	}
	sameAsProvider(t, prov, waitServing(t, api, 6, 30*time.Second))

	// Clean stop of the leader: the next takes over at once; the client skips the stopped replica.
	stopped := time.Now()
	rs[next].stop(t)
	third := leaderOf(t, rs, 10*time.Second)
	t.Logf("handover after the leader stopped cleanly: %s (replica %d -> %d)", time.Since(stopped).Round(time.Millisecond), next, third)
	first := client.New(&client.Config{Server: rs[next].url, Servers: []string{rs[next].url, rs[third].url}, Token: cfg.Token})
	if err := first.Scale(context.Background(), "web", 4); err != nil {
		t.Fatalf("scale with the first server down: %v", err)
	}
	recs := waitServing(t, first, 4, 30*time.Second)
	sameAsProvider(t, prov, recs)

	// Every change of leader came at rest, so no create was left half done for the next to repeat.
	prov.mu.Lock()
	defer prov.mu.Unlock()
	for name, n := range prov.creates {
		if n != 1 {
			t.Errorf("instance %s was asked for %d times, want once", name, n)
		}
	}
}

// edgeStatsAddUp applies a distribution, which every replica runs a location of (its listener binds
// in one of them only, as they share this host), sends requests through its listener, and reads
// herd edge stats through each replica: each gives the sum of the three locations.
func edgeStatsAddUp(t *testing.T, rs []*replica, api *client.Client) {
	t.Helper()
	origin, _ := countingOrigin(t, "o")
	port := freeport.TCP(t)
	docs, err := v1alpha1.DecodeAndValidate(fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Distribution
metadata: {name: site}
spec:
  listeners: [{port: %d}]
  origins: [{name: o, url: %q}]
  behaviors: [{pathPattern: "*", origin: o}]
`, port, origin.URL), "fake", kubebin.Version)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := api.ApplyAll(context.Background(), nil, []v1alpha1.Distribution{*docs[0].Object.(*v1alpha1.Distribution)}); err != nil {
		t.Fatalf("apply the distribution: %v", err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, want := range []string{"Miss", "Hit", "Hit"} {
		for {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/a", port))
			if err == nil {
				resp.Body.Close()
				if x := resp.Header.Get("X-Cache"); x != want {
					t.Fatalf("GET through the edge: X-Cache %q, want %q", x, want)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the distribution's listener does not serve: %v", err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for i, r := range rs {
		st, err := r.api.EdgeStats(context.Background(), "site")
		if err != nil {
			t.Fatalf("herd edge stats through replica %d: %v", i, err)
		}
		if s := st.Stats; st.Locations != len(rs) || s.Requests != 3 || s.Hits != 2 || s.Misses != 1 || len(st.Unreached) > 0 {
			t.Fatalf("herd edge stats through replica %d: %+v, want 3 requests (2 hits, 1 miss) from %d locations", i, st, len(rs))
		}
	}
}

// TestIntegrationHAQuorumLoss takes etcd members away under two replicas: with one of three
// gone every request succeeds (the client retries once at most); with two gone the API answers
// 503 "etcd has no quorum"; when they return, a leader is elected again and a scale is carried
// out, with nothing done by hand.
func TestIntegrationHAQuorumLoss(t *testing.T) {
	ec := etcdcluster.StartTest(t, etcdcluster.FastElection...)
	f, err := fake.New(fake.Options{BootDelay: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rs := haReplicas(t, ec, f, dir, 2)
	cfg, err := client.LoadConfig(filepath.Join(dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	api := client.New(cfg)
	leaderOf(t, rs, 20*time.Second)
	applyManifest(t, api, fakeWeb(2))
	waitServing(t, api, 2, 30*time.Second)

	// One member down, whichever led etcd: reads and writes go on.
	if err := ec.Kill(ec.Members[0]); err != nil {
		t.Fatal(err)
	}
	retried := 0
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := api.ListFleets(ctx)
		if err == nil {
			err = api.Scale(ctx, "web", int32(2+i%2))
		}
		cancel()
		if err != nil {
			retried++
			if retried > 1 {
				t.Fatalf("request %d with one etcd member down failed again: %v", i, err)
			}
		}
	}
	t.Logf("one etcd member down: 40 requests, %d retried", retried)

	// Two down: no quorum.
	if err := ec.Kill(ec.Members[1]); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = rs[0].api.ListFleets(context.Background())
	if !client.IsUnavailable(err) || !strings.Contains(err.Error(), "etcd has no quorum") {
		t.Fatalf("list fleets without quorum: %v; want 503 etcd has no quorum", err)
	}
	t.Logf("without quorum the API answered in %s: %v", time.Since(start).Round(time.Millisecond), err)
	if err := rs[1].api.Scale(context.Background(), "web", 3); !client.IsUnavailable(err) {
		t.Fatalf("scale without quorum: %v; want 503", err)
	}

	for _, m := range ec.Members[:2] {
		if err := ec.Restart(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	back := time.Now()
	leaderOf(t, rs, 30*time.Second)
	t.Logf("quorum back: a synced leader after %s", time.Since(back).Round(time.Millisecond))
	if err := api.Scale(context.Background(), "web", 3); err != nil {
		t.Fatalf("scale once quorum is back: %v", err)
	}
	waitServing(t, api, 3, 30*time.Second)
}
