package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/bolt"
	"herd.dev/herd/internal/store/etcd"
	"herd.dev/herd/internal/store/etcd/etcdcluster"
	"herd.dev/herd/internal/store/memory"
)

// gatedStore holds every write until n readers have listed the fleets: n concurrent applies then
// all decide on the same store contents, before any of them wrote, which is the race two applies
// run when they read at the same moment, made certain.
type gatedStore struct {
	store.Store
	n     int
	mu    sync.Mutex
	lists int
	open  chan struct{}
}

func gate(st store.Store, n int) *gatedStore {
	return &gatedStore{Store: st, n: n, open: make(chan struct{})}
}

func (g *gatedStore) List(ctx context.Context, kind string) ([]store.Record, int64, error) {
	recs, rev, err := g.Store.List(ctx, kind)
	if kind == store.Fleets {
		g.mu.Lock()
		if g.lists++; g.lists == g.n {
			close(g.open)
		}
		g.mu.Unlock()
	}
	return recs, rev, err
}

func (g *gatedStore) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(30 * time.Second):
		return nil, fmt.Errorf("gated store: only %d of %d applies listed the fleets in 30s", g.lists, g.n)
	}
	return g.Store.Txn(ctx, ops...)
}

// applyConcurrently applies n fleets, each of its own name, all on load-balancer port 8080 (and,
// for hostname, all with one global hostname) at once on st, and checks that exactly one is
// stored and every other apply is refused with the clash, naming the winner.
func applyConcurrently(t *testing.T, st store.Store, hostname bool) {
	const n = 8
	srv := httptest.NewServer(New(Options{Store: gate(st, n), Token: token, DefaultProvider: "fake", Providers: []string{"fake"}}))
	t.Cleanup(srv.Close)
	codes := make([]int, n)
	bodies := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			codes[i], bodies[i] = call(t, srv, token, "POST", "/v1/apply", fleetJSON(fmt.Sprintf("web-%d", i), func(f *v1alpha1.Fleet) {
				withListener(8080)(f)
				if hostname {
					f.Spec.Listeners[0].Port = int32(9000 + i)
					withHostname("web.herd.test")(f)
				}
			}))
		})
	}
	wg.Wait()
	fleets, _, err := store.ListObjects[v1alpha1.Fleet](context.Background(), st, store.Fleets)
	if err != nil {
		t.Fatal(err)
	}
	if len(fleets) != 1 {
		var names []string
		for _, f := range fleets {
			names = append(names, f.Metadata.Name)
		}
		t.Fatalf("%d fleets stored (%s), want exactly one to win", len(fleets), strings.Join(names, ", "))
	}
	winner := fleets[0].Metadata.Name
	want := `port 8080 is already claimed by fleet \"` + winner + `\"`
	if hostname {
		want = `web.herd.test is already the hostname of fleet \"` + winner + `\"`
	}
	for i := range n {
		name := fmt.Sprintf("web-%d", i)
		switch {
		case name == winner && codes[i] != http.StatusOK:
			t.Errorf("apply of %s, the fleet stored: %d %s", name, codes[i], bodies[i])
		case name != winner && (codes[i] != http.StatusUnprocessableEntity || !strings.Contains(bodies[i], want)):
			t.Errorf("apply of %s: %d %s, want 422 with %s", name, codes[i], bodies[i], want)
		}
	}
}

// concurrentApplies runs applyConcurrently on a new store of each implementation.
func concurrentApplies(t *testing.T, stores map[string]func(*testing.T) store.Store) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) {
			t.Run("port", func(t *testing.T) { applyConcurrently(t, open(t), false) })
			t.Run("hostname", func(t *testing.T) { applyConcurrently(t, open(t), true) })
		})
	}
}

// Concurrent applies of different fleets on one load-balancer port (or one hostname): exactly one
// is stored, the others are refused naming it, on the memory and bolt stores.
func TestApplyConcurrentClaims(t *testing.T) {
	concurrentApplies(t, map[string]func(*testing.T) store.Store{
		"memory": func(t *testing.T) store.Store {
			st := memory.New()
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
		"bolt": func(t *testing.T) store.Store {
			st, err := bolt.Open(filepath.Join(t.TempDir(), "herd.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	})
}

// The same on a 3-member etcd cluster, whose Txn gives all of its ops one revision.
func TestIntegrationApplyConcurrentClaimsEtcd(t *testing.T) {
	c := etcdcluster.StartTest(t)
	var prefix int
	concurrentApplies(t, map[string]func(*testing.T) store.Store{
		"etcd": func(t *testing.T) store.Store {
			prefix++
			st, err := etcd.New(context.Background(), etcd.Config{Endpoints: c.Endpoints(), Prefix: fmt.Sprintf("/herd-test/%d/", prefix)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
			return st
		},
	})
}

// Deleting a fleet gives up its claims; a fleet that changes its port gives up the old one.
func TestApplyReleasesClaims(t *testing.T) {
	srv, st := newServer(t)
	claims := func() string {
		recs, _, err := st.List(context.Background(), store.Claims)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.Name+"="+string(r.Value))
		}
		return strings.Join(out, " ")
	}
	for _, step := range []struct {
		method, path, body, want string
	}{
		{"POST", "/v1/apply", fleetJSON("web", withListener(8080)), `discovery-name-web={"fleet":"web"} port-8080={"fleet":"web"}`},
		{"POST", "/v1/apply", fleetJSON("web", withListener(8081)), `discovery-name-web={"fleet":"web"} port-8081={"fleet":"web"}`},
		{"POST", "/v1/apply", fleetJSON("api", withListener(8080)), `discovery-name-api={"fleet":"api"} discovery-name-web={"fleet":"web"} port-8080={"fleet":"api"} port-8081={"fleet":"web"}`},
		{"DELETE", "/v1/fleets/web", "", `discovery-name-api={"fleet":"api"} port-8080={"fleet":"api"}`},
	} {
		if code, body := call(t, srv, token, step.method, step.path, step.body); code != http.StatusOK {
			t.Fatalf("%s %s: %d %s", step.method, step.path, code, body)
		}
		if got := claims(); got != step.want {
			t.Fatalf("after %s %s: claims %s, want %s", step.method, step.path, got, step.want)
		}
	}
	if code, body := call(t, srv, token, "DELETE", "/v1/fleets/web", ""); code != http.StatusNotFound {
		t.Fatalf("delete of a deleted fleet: %d %s, want 404", code, body)
	}
}
