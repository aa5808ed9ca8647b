package events

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	clocktesting "k8s.io/utils/clock/testing"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

// run starts r's writer until the test ends.
func run(t *testing.T, r *Recorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("recorder stopped with %v", err)
		}
	})
}

func stored(t *testing.T, st store.Store) []*v1alpha1.Event {
	t.Helper()
	evs, _, err := store.ListObjects[v1alpha1.Event](context.Background(), st, store.Events)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// waitStored waits until the store holds an event with this message and returns every event.
func waitStored(t *testing.T, st store.Store, msg string) []*v1alpha1.Event {
	t.Helper()
	var evs []*v1alpha1.Event
	err := wait.PollUntilContextTimeout(context.Background(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		evs = stored(t, st)
		for _, ev := range evs {
			if ev.Message == msg {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("event %q not stored: %v (stored: %d)", msg, err, len(evs))
	}
	return evs
}

func count(evs []*v1alpha1.Event, msg string) int {
	n := 0
	for _, ev := range evs {
		if ev.Message == msg {
			n++
		}
	}
	return n
}

// Eventf returns at once even when nothing writes: events past the buffer are dropped and
// counted, and those buffered are written once the writer starts.
func TestEventfNeverBlocksAndCountsDrops(t *testing.T) {
	st := memory.New()
	r := New(Options{Store: st, Buffer: 2})
	for i := range 5 {
		r.Eventf("Fleet/web", v1alpha1.EventNormal, "Test", "event %d", i)
	}
	if n := r.Dropped(); n != 3 {
		t.Fatalf("Dropped() = %d, want 3", n)
	}
	run(t, r)
	evs := waitStored(t, st, "event 1")
	if len(evs) != 2 || count(evs, "event 0") != 1 {
		t.Fatalf("stored %d events, want the 2 buffered ones", len(evs))
	}
}

// The same event for the same object is stored once within the dedupe window, and again after.
func TestDedupeWithinWindow(t *testing.T) {
	st := memory.New()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	r := New(Options{Store: st, Clock: clk, DedupeWindow: 30 * time.Second})
	run(t, r)
	r.Eventf("Fleet/web", v1alpha1.EventWarning, "CreateFailed", "boom")
	r.Eventf("Fleet/web", v1alpha1.EventWarning, "CreateFailed", "boom")
	r.Eventf("Fleet/api", v1alpha1.EventWarning, "CreateFailed", "boom") // another object
	r.Eventf("Fleet/web", v1alpha1.EventNormal, "Marker", "first pass")
	evs := waitStored(t, st, "first pass") // written in order: the duplicates were seen before
	if n := count(evs, "boom"); n != 2 {
		t.Fatalf("%d boom events within the window, want 2 (one per object)", n)
	}
	clk.SetTime(clk.Now().Add(30 * time.Second))
	r.Eventf("Fleet/web", v1alpha1.EventWarning, "CreateFailed", "boom")
	r.Eventf("Fleet/web", v1alpha1.EventNormal, "Marker", "second pass")
	evs = waitStored(t, st, "second pass")
	if n := count(evs, "boom"); n != 3 {
		t.Fatalf("%d boom events after the window, want 3", n)
	}
}

// The store keeps the newest MaxEvents, also across a restart of the recorder.
func TestTrimKeepsNewest(t *testing.T) {
	st := memory.New()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	write := func(from, to int) {
		ctx, cancel := context.WithCancel(context.Background())
		r := New(Options{Store: st, Clock: clk, MaxEvents: 3})
		done := make(chan error, 1)
		go func() { done <- r.Start(ctx) }()
		for i := from; i < to; i++ {
			clk.SetTime(clk.Now().Add(time.Second))
			r.Eventf("Fleet/web", v1alpha1.EventNormal, "Test", "event %d", i)
		}
		waitStored(t, st, fmt.Sprintf("event %d", to-1))
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	write(0, 5)
	write(5, 7)
	evs := stored(t, st)
	var got []string
	for _, ev := range evs {
		got = append(got, ev.Message)
	}
	if want := "[event 4 event 5 event 6]"; fmt.Sprint(got) != want {
		t.Fatalf("stored %v, want %s", got, want)
	}
}

// slowStore holds each Txn until release is closed, and fails it if its context ended meanwhile,
// as a store waiting on the network does.
type slowStore struct {
	store.Store
	entered chan struct{}
	release chan struct{}
}

func (s *slowStore) Txn(ctx context.Context, ops ...store.Op) ([]store.Record, error) {
	s.entered <- struct{}{}
	<-s.release
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.Store.Txn(ctx, ops...)
}

// An event whose write is under way when the writer is stopped is stored, not lost with the
// canceled context.
func TestStopFinishesTheWriteUnderWay(t *testing.T) {
	st := &slowStore{Store: memory.New(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	r := New(Options{Store: st})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	r.Eventf("Fleet/web", v1alpha1.EventNormal, "CanaryStep", "step under way")
	select {
	case <-st.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("the event's write never started")
	}
	cancel()
	close(st.release)
	if err := <-done; err != nil {
		t.Fatalf("recorder stopped with %v", err)
	}
	if n := count(stored(t, st.Store), "step under way"); n != 1 {
		t.Fatalf("%d events stored, want the one under way when the writer stopped", n)
	}
}
