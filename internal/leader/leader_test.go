package leader_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"herd.dev/herd/internal/leader"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/etcd"
	"herd.dev/herd/internal/store/etcd/etcdcluster"
)

const prefix = "/herd-leader/"

// candidate runs an Elector and reports each term it gets.
type candidate struct {
	name  string
	terms chan *leader.Term
	ended chan string
	stop  context.CancelFunc
	done  chan struct{}
}

func campaign(t *testing.T, cli *clientv3.Client, name string) *candidate {
	t.Helper()
	el, err := leader.New(leader.Options{Client: cli, Prefix: prefix, TTL: 1, Self: leader.Replica{Name: name}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &candidate{name: name, terms: make(chan *leader.Term, 8), ended: make(chan string, 8), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		_ = el.Run(ctx, func(ctx context.Context, term *leader.Term) {
			c.terms <- term
			<-ctx.Done()
			c.ended <- name
		})
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

func waitTerm(t *testing.T, cs ...*candidate) (*candidate, *leader.Term) {
	t.Helper()
	cases := make(chan struct {
		c    *candidate
		term *leader.Term
	}, len(cs))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, c := range cs {
		wg.Go(func() {
			select {
			case term := <-c.terms:
				cases <- struct {
					c    *candidate
					term *leader.Term
				}{c, term}
			case <-stop:
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()
	select {
	case got := <-cases:
		return got.c, got.term
	case <-time.After(20 * time.Second):
		t.Fatal("no candidate became leader within 20s")
	}
	return nil, nil
}

// TestIntegrationElectionTakeover runs two candidates on a real 3-member etcd, crashes the
// leader (its etcd client closes without resigning, so its lease must run out) and sees the
// other take over; the old term's fenced store refuses writes and its Check fails, while the new
// term's writes go through.
func TestIntegrationElectionTakeover(t *testing.T) {
	ec := etcdcluster.StartTest(t, etcdcluster.FastElection...)
	st, err := etcd.New(context.Background(), etcd.Config{Endpoints: ec.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()

	cliA := ec.Client(t)
	a := campaign(t, cliA, "a")
	_, aTerm := waitTerm(t, a)
	b := campaign(t, ec.Client(t), "b")
	// a leads; its term's fenced store writes.
	who, _, err := leader.Leader(ctx, cliA, prefix)
	if err != nil || who.Name != "a" {
		t.Fatalf("Leader = %+v, %v; want a", who, err)
	}
	fencedA := st.Fenced(aTerm.Key, aTerm.Rev)
	if _, err := store.Create(ctx, fencedA, "things", "by-a", []byte(`{}`)); err != nil {
		t.Fatalf("write of the leader through its fence: %v", err)
	}

	crashed := time.Now()
	_ = cliA.Close()
	select {
	case <-a.ended:
	case <-time.After(5 * time.Second):
		t.Fatal("a's term did not end within 5s of its etcd client closing")
	}
	c, bTerm := waitTerm(t, b)
	if c != b {
		t.Fatal("b did not lead")
	}
	t.Logf("takeover after the leader crashed: %s (lease TTL 1s, etcd heartbeat 50ms, election 500ms)", time.Since(crashed).Round(time.Millisecond))

	if _, err := store.Create(ctx, fencedA, "things", "late-a", []byte(`{}`)); !errors.Is(err, store.ErrFenced) {
		t.Errorf("write of the old leader after takeover: %v, want ErrFenced", err)
	}
	if _, err := st.Get(ctx, "things", "late-a"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("the old leader's refused write is in the store: %v", err)
	}
	// A fenced op that would fail on its own still says ErrFenced once the fence is gone...
	if _, err := store.Create(ctx, fencedA, "things", "by-a", []byte(`{}`)); !errors.Is(err, store.ErrFenced) {
		t.Errorf("create of an existing key by the old leader: %v, want ErrFenced", err)
	}
	// ...and the new term's fence reports the op's own failure.
	fencedB := st.Fenced(bTerm.Key, bTerm.Rev)
	if _, err := store.Create(ctx, fencedB, "things", "by-a", []byte(`{}`)); !errors.Is(err, store.ErrExists) {
		t.Errorf("create of an existing key by the leader: %v, want ErrExists", err)
	}
	if _, err := store.Create(ctx, fencedB, "things", "by-b", []byte(`{}`)); err != nil {
		t.Errorf("write of the new leader: %v", err)
	}
	if err := bTerm.Check(ctx); err != nil {
		t.Errorf("new term's Check: %v", err)
	}

	// A clean stop resigns: a third candidate takes over without waiting for a lease to expire.
	c3 := campaign(t, ec.Client(t), "c")
	stopped := time.Now()
	b.stop()
	<-b.done
	if err := bTerm.Check(ctx); !errors.Is(err, leader.ErrLostLeadership) {
		t.Errorf("Check of a resigned term: %v, want ErrLostLeadership", err)
	}
	if c, _ := waitTerm(t, c3); c != c3 {
		t.Fatal("c did not lead")
	}
	t.Logf("handover after a clean stop: %s", time.Since(stopped).Round(time.Millisecond))
}
