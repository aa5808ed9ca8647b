package etcd_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/etcd"
	"herd.dev/herd/internal/store/etcd/etcdcluster"
	"herd.dev/herd/internal/store/storetest"
)

// maxTxnOps is the test cluster's --max-txn-ops: the suite writes up to 1,000 records in one Txn.
const maxTxnOps = 1024

// watchHistory is the test stores' WatchHistory. etcd delivers watch events a little after their
// writes commit (a few thousand a second with the previous values deletes need), so a consumer
// that reads nothing while the suite writes 2*store.DefaultWatchHistory changes has only some of
// them waiting for it when the writes end: with the default history it might never be dropped.
// A tenth of it is exceeded within the first of the suite's 20 Txns of 1,000.
const watchHistory = store.DefaultWatchHistory / 10

// startCluster starts a 3-member etcd cluster of real etcd servers on loopback for the test, and
// stops it when the test ends. It skips under -short and when no etcd server is installed.
func startCluster(t *testing.T) *etcdcluster.Cluster {
	return etcdcluster.StartTest(t, "--max-txn-ops="+strconv.Itoa(maxTxnOps))
}

var prefixes atomic.Int64

// openStore opens a store on c under a prefix of its own, so that every store of a test starts
// empty, and closes it when the test ends.
func openStore(t *testing.T, c *etcdcluster.Cluster) *etcd.Store {
	t.Helper()
	s, err := etcd.New(context.Background(), etcd.Config{
		Endpoints:    c.Endpoints(),
		Prefix:       fmt.Sprintf("/herd-test/%d/", prefixes.Add(1)),
		MaxTxnOps:    maxTxnOps,
		WatchHistory: watchHistory,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// adminClient is a plain etcd client on c, for what the store does not do itself (compaction).
func adminClient(t *testing.T, c *etcdcluster.Cluster) *clientv3.Client {
	return c.Client(t)
}

// waitWritable waits until the cluster commits a write: after losing its leader, the members left
// elect another first (about a second with etcd's default election timeout).
func waitWritable(t *testing.T, cli *clientv3.Client) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		put, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, last = cli.Put(put, "/herd-test/probe", "x")
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("the cluster took no write for 30 s after losing a member: %v (%v)", last, err)
	}
}

func compact(t *testing.T, cli *clientv3.Client, rev int64) {
	t.Helper()
	if _, err := cli.Compact(context.Background(), rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact etcd at %d: %v", rev, err)
	}
}

// TestIntegrationEtcdConformance runs the store suite on a 3-member cluster, then kills one
// member and runs it again on the two left: a quorum serves every read, write and watch.
func TestIntegrationEtcdConformance(t *testing.T) {
	c := startCluster(t)
	admin := adminClient(t, c)
	newStore := func(t *testing.T) store.Store { return openStore(t, c) }
	forget := storetest.WithForget(func(t *testing.T, _ store.Store, rev int64) { compact(t, admin, rev) })

	t.Run("3 members", func(t *testing.T) {
		start := time.Now()
		storetest.Run(t, newStore, forget)
		t.Logf("suite on 3 members: %s", time.Since(start).Round(time.Millisecond))
	})
	t.Run("2 of 3 members", func(t *testing.T) {
		if err := c.Kill(c.Members[0]); err != nil {
			t.Fatal(err)
		}
		waitWritable(t, admin)
		start := time.Now()
		storetest.Run(t, newStore, forget)
		t.Logf("suite on 2 of 3 members: %s", time.Since(start).Round(time.Millisecond))
	})
}

// TestIntegrationEtcdMemberLoss writes through a store on all three members, kills one of them
// with SIGKILL, and shows that every record written before is still there, that reads and writes
// go on, and that an open watch keeps delivering.
func TestIntegrationEtcdMemberLoss(t *testing.T) {
	c := startCluster(t)
	s := openStore(t, c)
	ctx := context.Background()
	const before, after = 20, 50
	for i := range before {
		if _, err := store.Create(ctx, s, "instance", "before-"+strconv.Itoa(i), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
	}
	_, rev, err := s.List(ctx, "instance")
	if err != nil {
		t.Fatal(err)
	}
	watch, err := s.Watch(ctx, "instance", rev)
	if err != nil {
		t.Fatal(err)
	}

	// Kill the member this client is most likely talking to (its first endpoint) and then check
	// every kind of request against the other two.
	if err := c.Kill(c.Members[0]); err != nil {
		t.Fatal(err)
	}
	recs, _, err := s.List(ctx, "instance")
	if err != nil || len(recs) != before {
		t.Fatalf("List after losing a member = %d records, %v; want %d", len(recs), err, before)
	}
	for i := range after {
		name := "after-" + strconv.Itoa(i)
		if err := createRetrying(ctx, s, name); err != nil {
			t.Fatalf("write %d after losing a member: %v", i, err)
		}
		rec, err := s.Get(ctx, "instance", name)
		if err != nil {
			t.Fatalf("read %d after losing a member: %v", i, err)
		}
		if _, err := store.Update(ctx, s, "instance", name, []byte(`{"n":1}`), rec.ResourceVersion); err != nil {
			t.Fatalf("conditional write %d after losing a member: %v", i, err)
		}
		if got, err := s.Get(ctx, "instance", name); err != nil || string(got.Value) != `{"n":1}` {
			t.Fatalf("read %d after losing a member = %s, %v", i, got.Value, err)
		}
	}
	for i := range 2 * after {
		select {
		case e, ok := <-watch:
			if !ok {
				t.Fatalf("the watch closed after %d of %d events", i, 2*after)
			}
			if want := "after-" + strconv.Itoa(i/2); e.Record.Name != want {
				t.Fatalf("watch event %d is %s %s, want %s", i, e.Type, e.Record.Name, want)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("watch event %d of %d did not come", i, 2*after)
		}
	}

	// The member comes back, catches up, and the cluster can lose another one.
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Restart(rctx, c.Members[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Kill(c.Members[1]); err != nil {
		t.Fatal(err)
	}
	// If the member killed led the cluster, writes time out while the other two elect a new leader;
	// the store resumes once they have one.
	if err := createRetrying(ctx, s, "last"); err != nil {
		t.Fatalf("write after a member returned and another left: %v", err)
	}
	if recs, _, err := s.List(ctx, "instance"); err != nil || len(recs) != before+after+1 {
		t.Fatalf("List = %d records, %v; want %d", len(recs), err, before+after+1)
	}
}

// TestIntegrationEtcdWatchCompaction shows a watcher's path through a compaction: a watch that is
// keeping up is not affected, one that resumes from a compacted revision fails with ErrCompacted,
// and listing again and watching from the list's revision misses nothing.
func TestIntegrationEtcdWatchCompaction(t *testing.T) {
	c := startCluster(t)
	admin := adminClient(t, c)
	s := openStore(t, c)
	ctx := context.Background()
	put := func(name, value string) store.Record {
		t.Helper()
		recs, err := s.Txn(ctx, store.Op{Type: store.OpPut, Kind: "fleet", Name: name, Value: []byte(value)})
		if err != nil {
			t.Fatal(err)
		}
		return recs[0]
	}
	_, rev0, err := s.List(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	live, err := s.Watch(ctx, "fleet", rev0)
	if err != nil {
		t.Fatal(err)
	}
	seen := put("a", "1").ResourceVersion // the resuming watcher saw up to here, then went away
	put("b", "2")
	last := put("a", "3")
	compact(t, admin, last.ResourceVersion)

	if _, err := s.Watch(ctx, "fleet", seen); !errors.Is(err, store.ErrCompacted) {
		t.Fatalf("Watch from compacted revision %d: error = %v, want ErrCompacted", seen, err)
	}
	recs, rev, err := s.List(ctx, "fleet")
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 || string(recs[0].Value) != "3" || rev < last.ResourceVersion {
		t.Fatalf("List after compaction = %v at %d, want a=3 and b=2 at %d or later", recs, rev, last.ResourceVersion)
	}
	again, err := s.Watch(ctx, "fleet", rev)
	if err != nil {
		t.Fatalf("Watch from the list's revision: %v", err)
	}
	put("c", "4")
	want := map[<-chan store.Event][]string{
		live:  {"a=1", "b=2", "a=3", "c=4"},
		again: {"c=4"},
	}
	for ch, names := range want {
		for _, w := range names {
			select {
			case e, ok := <-ch:
				if !ok {
					t.Fatalf("watch closed, want %s", w)
				}
				if got := e.Record.Name + "=" + string(e.Record.Value); got != w {
					t.Fatalf("event %s, want %s", got, w)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("no event, want %s", w)
			}
		}
	}
}

// createRetrying creates an instance record the way herd's controllers write: a write etcd could
// not serve (store.ErrUnavailable) is tried again until it succeeds or 30 s have passed. A write in
// flight when a leader dies is dropped with it and times out (5 s); so can the next one, sent
// before the members left have noticed. A retry that finds the record there means an earlier
// attempt did commit, which is success too.
func createRetrying(ctx context.Context, s store.Store, name string) error {
	var failed int
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := store.Create(ctx, s, "instance", name, []byte(`{}`))
		switch {
		case err == nil, failed > 0 && errors.Is(err, store.ErrExists):
			return true, nil
		case errors.Is(err, store.ErrUnavailable):
			failed, last = failed+1, err
			return false, nil
		default:
			return false, err
		}
	})
	if err != nil {
		return fmt.Errorf("%w after %d unavailable attempts, the last: %w", err, failed, last)
	}
	return nil
}
