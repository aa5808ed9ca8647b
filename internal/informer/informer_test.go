package informer

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// cuttable is a store whose watches the test can end, as a store does to a watcher that fell
// behind.
type cuttable struct {
	store.Store
	mu   sync.Mutex
	cuts []context.CancelFunc
}

func (c *cuttable) Watch(ctx context.Context, kind string, since int64) (<-chan store.Event, error) {
	ctx, cancel := context.WithCancel(ctx)
	c.mu.Lock()
	c.cuts = append(c.cuts, cancel)
	c.mu.Unlock()
	return c.Store.Watch(ctx, kind, since)
}

func (c *cuttable) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cancel := range c.cuts {
		cancel()
	}
	c.cuts = nil
}

// recorder keeps what a handler was told, as "kind name old-version new-version" lines.
type recorder struct {
	mu    sync.Mutex
	lines []string
}

func (r *recorder) handler() Handler {
	return Handler{
		Fleet: func(old, new *v1alpha1.Fleet) {
			var o, n *v1alpha1.ObjectMeta
			if old != nil {
				o = &old.Metadata
			}
			if new != nil {
				n = &new.Metadata
			}
			r.add("fleet", o, n)
		},
		Instance: func(old, new *v1alpha1.Instance) {
			var o, n *v1alpha1.ObjectMeta
			if old != nil {
				o = &old.Metadata
			}
			if new != nil {
				n = &new.Metadata
			}
			r.add("instance", o, n)
		},
	}
}

func (r *recorder) add(kind string, old, new *v1alpha1.ObjectMeta) {
	name, oldRV, newRV := "", int64(0), int64(0)
	if old != nil {
		name, oldRV = old.Name, old.ResourceVersion
	}
	if new != nil {
		name, newRV = new.Name, new.ResourceVersion
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprintf("%s %s %d %d", kind, name, oldRV, newRV))
}

// waitFor waits until the handler was told line.
func (r *recorder) waitFor(t *testing.T, line string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		for _, l := range r.lines {
			if l == line {
				r.mu.Unlock()
				return
			}
		}
		r.mu.Unlock()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	t.Fatalf("the handler was never told %q; it was told %q", line, r.lines)
}

func put(t *testing.T, st store.Store, kind string, obj store.Object) int64 {
	t.Helper()
	if err := store.PutObject(context.Background(), st, kind, obj); err != nil {
		t.Fatal(err)
	}
	return obj.GetMeta().ResourceVersion
}

func fleet(name string) *v1alpha1.Fleet {
	return &v1alpha1.Fleet{Metadata: v1alpha1.ObjectMeta{Name: name}}
}

func instance(name, fleet string) *v1alpha1.Instance {
	return &v1alpha1.Instance{Metadata: v1alpha1.ObjectMeta{Name: name}, Spec: v1alpha1.InstanceSpec{Fleet: fleet}}
}

func start(t *testing.T, inf *Informer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- inf.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestListThenWatch: what the store held at start reaches a handler as added, later writes as
// changes, and the reads follow.
func TestListThenWatch(t *testing.T) {
	st := memory.New()
	f1 := put(t, st, store.Fleets, fleet("web"))
	i1 := put(t, st, store.Instances, instance("web-1", "web"))
	inf := New(Options{Store: st})
	var before recorder
	inf.AddHandler(before.handler())
	start(t, inf)
	before.waitFor(t, fmt.Sprintf("fleet web 0 %d", f1))
	before.waitFor(t, fmt.Sprintf("instance web-1 0 %d", i1))

	var after recorder // added once synced: told of what is there as added
	inf.AddHandler(after.handler())
	after.waitFor(t, fmt.Sprintf("instance web-1 0 %d", i1))

	in := instance("web-1", "web")
	in.Metadata.ResourceVersion = i1
	in.Status.Phase = v1alpha1.PhaseReady
	i2 := put(t, st, store.Instances, in)
	after.waitFor(t, fmt.Sprintf("instance web-1 %d %d", i1, i2))
	if got := inf.Instances("web"); len(got) != 1 || got[0].Status.Phase != v1alpha1.PhaseReady {
		t.Fatalf("Instances(web) = %v, want web-1 Ready", got)
	}
	if err := store.Delete(context.Background(), st, store.Fleets, "web", 0); err != nil {
		t.Fatal(err)
	}
	after.waitFor(t, fmt.Sprintf("fleet web %d 0", f1))
	if _, ok := inf.Fleet("web"); ok {
		t.Fatal("Fleet(web) still there after its delete")
	}
}

// TestRelist: when a watch ends, the informer lists again and hands the handlers what changed
// while it was not watching, deletes included.
func TestRelist(t *testing.T) {
	st := &cuttable{Store: memory.New()}
	put(t, st, store.Fleets, fleet("a"))
	ib := put(t, st, store.Instances, instance("b-1", "b"))
	inf := New(Options{Store: st, Retry: time.Millisecond})
	var rec recorder
	inf.AddHandler(rec.handler())
	start(t, inf)

	// Writes the informer cannot see: the watches are cut right after.
	st.cut()
	if err := store.Delete(context.Background(), st.Store, store.Instances, "b-1", 0); err != nil {
		t.Fatal(err)
	}
	ic := put(t, st.Store, store.Instances, instance("c-1", "c"))
	rec.waitFor(t, fmt.Sprintf("instance b-1 %d 0", ib))
	rec.waitFor(t, fmt.Sprintf("instance c-1 0 %d", ic))
	if got := inf.InstanceFleets(); len(got) != 1 || got[0] != "c" {
		t.Fatalf("InstanceFleets() = %v, want [c]", got)
	}
}

// TestResync hands every object to the handlers again, as a change from itself to itself.
func TestResync(t *testing.T) {
	st := memory.New()
	f := put(t, st, store.Fleets, fleet("web"))
	inf := New(Options{Store: st, Resync: 10 * time.Millisecond})
	var rec recorder
	inf.AddHandler(rec.handler())
	start(t, inf)
	rec.waitFor(t, fmt.Sprintf("fleet web %d %d", f, f))
}

// TestRemoveHandler: a removed handler is told nothing more.
func TestRemoveHandler(t *testing.T) {
	st := memory.New()
	inf := New(Options{Store: st})
	var gone, kept recorder
	remove := inf.AddHandler(gone.handler())
	inf.AddHandler(kept.handler())
	start(t, inf)
	remove()
	f := put(t, st, store.Fleets, fleet("web"))
	kept.waitFor(t, fmt.Sprintf("fleet web 0 %d", f))
	gone.mu.Lock()
	defer gone.mu.Unlock()
	if len(gone.lines) != 0 {
		t.Fatalf("a removed handler was told %q", gone.lines)
	}
}
