// The checks of Watch: replay then live events, kind filters, revisions in the future or compacted
// away, cancellation, slow consumers, and a List followed by a Watch missing nothing.

package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/internal/store"
)

func testWatchReplayThenLive(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTxn(t, s, put("fleet", "a", "1"))[0]
	written := mustTxn(t, s, put("fleet", "b", "2"), put("fleet", "c", "3"))

	ch := mustWatch(t, ctx, s, "fleet", a.ResourceVersion)
	written = append(written, mustTxn(t, s, put("fleet", "d", "4"))...)
	written = append(written, mustTxn(t, s, put("fleet", "a", "5"))...)

	// The events are the writes, at the versions the Txns returned.
	var got, want []string
	for i, w := range written {
		e := next(t, ch)
		got = append(got, fmt.Sprintf("%s %s=%s@%d", e.Type, e.Record.Name, e.Record.Value, e.Record.ResourceVersion))
		want = append(want, fmt.Sprintf("%s %s=%s@%d", []string{"Added", "Added", "Added", "Modified"}[i], w.Name, w.Value, w.ResourceVersion))
	}
	if !slices.Equal(got, want) {
		t.Errorf("events = %q, want %q", got, want)
	}
}

func testWatchEvents(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	ctx := context.Background()
	s := newStore(t)
	_, rev := mustList(t, s, "fleet")
	ch := mustWatch(t, ctx, s, "", rev)
	recs := mustTxn(t, s,
		store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", Value: []byte(`1`)},
		store.Op{Type: store.OpPut, Kind: "instance", Name: "web-1", Value: []byte(`2`)})
	recs = append(recs, mustTxn(t, s, store.Op{Type: store.OpUpdate, Kind: "fleet", Name: "web", Value: []byte(`3`)})...)
	recs = append(recs, mustTxn(t, s, store.Op{Type: store.OpPut, Kind: "instance", Name: "web-1", Value: []byte(`4`)})...)
	recs = append(recs, mustTxn(t, s, store.Op{Type: store.OpDelete, Kind: "fleet", Name: "web"})...)

	// Each event carries the record its Txn returned; a delete's is the last value.
	types := []store.EventType{store.Added, store.Added, store.Modified, store.Modified, store.Deleted}
	var want []store.Event
	for i, r := range recs {
		if r.ResourceVersion <= rev {
			t.Fatalf("write %d at version %d, want one after %d", i, r.ResourceVersion, rev)
		}
		want = append(want, store.Event{Type: types[i], Record: r})
	}
	if string(want[4].Record.Value) != "3" {
		t.Errorf("the delete returned value %s, want the last value 3", want[4].Record.Value)
	}
	for i, w := range want {
		if e := next(t, ch); e.Type != w.Type || !equalRecord(e.Record, w.Record) {
			t.Errorf("event %d = %v %v, want %v %v", i, e.Type, e.Record, w.Type, w.Record)
		}
	}
}

func testWatchKindFilter(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	ctx := context.Background()
	s := newStore(t)
	_, rev := mustList(t, s, "fleet")
	fleets := mustWatch(t, ctx, s, "fleet", rev)
	instances := mustWatch(t, ctx, s, "instance", rev)
	for i := range 10 {
		mustTxn(t, s, put("instance", "i"+strconv.Itoa(i), "{}"))
		if i%3 == 0 {
			mustTxn(t, s, put("fleet", "f"+strconv.Itoa(i), "{}"))
		}
	}
	tests := []struct {
		kind  string
		ch    <-chan store.Event
		names []string
	}{
		{"fleet", fleets, []string{"f0", "f3", "f6", "f9"}},
		{"instance", instances, []string{"i0", "i1", "i2", "i3", "i4", "i5", "i6", "i7", "i8", "i9"}},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			var names []string
			var last int64
			for range tt.names {
				e := next(t, tt.ch)
				if e.Record.Kind != tt.kind || e.Record.ResourceVersion <= last {
					t.Errorf("event %v: want kind %s and a version after %d", e.Record, tt.kind, last)
				}
				last = e.Record.ResourceVersion
				names = append(names, e.Record.Name)
			}
			if !slices.Equal(names, tt.names) {
				t.Errorf("names = %q, want %q", names, tt.names)
			}
		})
	}
	// Nothing else may be queued: a write of a third kind and then one of fleet must arrive as the
	// very next fleet event.
	mustTxn(t, s, put("nodeimage", "x", "{}"), put("fleet", "last", "{}"))
	if e := next(t, fleets); e.Record.Name != "last" {
		t.Errorf("next fleet event is %v, want fleet/last", e.Record)
	}
}

func testWatchFromFutureRevision(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	s := newStore(t)
	_, rev := mustList(t, s, "fleet")
	ch, err := s.Watch(context.Background(), "fleet", rev+2)
	if err != nil {
		t.Fatalf("Watch from a revision not reached yet: %v", err)
	}
	// Three writes on an otherwise idle store take revisions rev+1, rev+2 and rev+3.
	mustTxn(t, s, put("fleet", "a", "1"))
	mustTxn(t, s, put("fleet", "b", "2"))
	c := mustTxn(t, s, put("fleet", "c", "3"))[0]
	if e := next(t, ch); e.Record.Name != "c" || e.Record.ResourceVersion != c.ResourceVersion {
		t.Errorf("first event = %v, want fleet/c at %d", e.Record, c.ResourceVersion)
	}
}

func testWatchCancel(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	s := newStore(t)
	_, rev := mustList(t, s, "fleet")
	ctx, cancel := context.WithCancel(context.Background())
	idle := mustWatch(t, ctx, s, "fleet", rev)
	mustTxn(t, s, put("fleet", "a", "1"))
	busy := mustWatch(t, ctx, s, "fleet", rev) // has an event waiting that nobody reads
	if e := next(t, idle); e.Record.Name != "a" {
		t.Fatalf("event = %v, want fleet/a", e.Record)
	}
	cancel()
	waitClosed(t, idle)
	waitClosed(t, busy)
	if _, err := s.Watch(ctx, "fleet", rev); !errors.Is(err, context.Canceled) {
		t.Errorf("Watch with a cancelled context: error = %v, want context.Canceled", err)
	}
	// The store is unaffected.
	mustTxn(t, s, put("fleet", "b", "2"))
}

func testWatchCompacted(t *testing.T, newStore func(*testing.T) store.Store, o options) {
	ctx := context.Background()
	s := newStore(t)
	_, rev0 := mustList(t, s, "instance")
	for i := range 3 {
		mustTxn(t, s, put("instance", "c"+strconv.Itoa(i), "{}"))
	}
	_, rev := mustList(t, s, "instance")
	o.forget(t, s, rev)

	if _, err := s.Watch(ctx, "instance", rev0); !errors.Is(err, store.ErrCompacted) {
		t.Errorf("Watch from before what the store remembers: error = %v, want ErrCompacted", err)
	}
	ch, err := s.Watch(ctx, "instance", rev)
	if err != nil {
		t.Fatalf("Watch from the revision it was made to forget up to: %v", err)
	}
	mustTxn(t, s, put("instance", "after", "{}"))
	if e := next(t, ch); e.Record.ResourceVersion <= rev {
		t.Errorf("first event at %d, want one after %d", e.Record.ResourceVersion, rev)
	}
}

func testWatchSlowConsumerDropped(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	ctx := context.Background()
	s := newStore(t)
	_, rev := mustList(t, s, "instance")
	slow := mustWatch(t, ctx, s, "instance", rev)
	// Nobody reads slow while twice the history is written: the writes must not wait for it.
	writeMany(t, s, 2*store.DefaultWatchHistory)

	// What slow got is an unbroken run of events from the start (writeMany writes i0, i1, ... in
	// Txns of 1,000), and then its channel closes.
	got, last := 0, rev
	deadline := time.After(waitTimeout)
	for done := false; !done; {
		select {
		case e, ok := <-slow:
			if !ok {
				done = true
				break
			}
			if name := "i" + strconv.Itoa(got%1000); e.Record.Name != name || e.Record.ResourceVersion < last || e.Record.ResourceVersion <= rev {
				t.Fatalf("slow watcher's event %d is %s at %d, want %s at %d or later", got, e.Record.Name, e.Record.ResourceVersion, name, max(last, rev+1))
			}
			got, last = got+1, e.Record.ResourceVersion
		case <-deadline:
			t.Fatalf("the slow watcher's channel is still open after %d events", got)
		}
	}
	if got >= 2*store.DefaultWatchHistory {
		t.Errorf("the slow watcher received all %d events: it was not dropped", got)
	}
	t.Logf("slow watcher received %d events before it was dropped", got)
}

func testListThenWatchHasNoGap(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	// Writers change kind item while, concurrently, the test lists item and watches from the list's
	// revision, again and again. Each list plus its watch must rebuild exactly the final state, and
	// each watch must see every revision after its list's exactly once, in order. Writer 0 also
	// waits, every handoverEvery writes, for the test to take a view, so that some views are sure
	// to be taken in the middle of the writing however the goroutines are scheduled.
	const writers, writesEach, names, handoverEvery = 4, 150, 20, 20
	ctx := context.Background()
	s := newStore(t)

	var wg sync.WaitGroup
	errs := make(chan error, writers)
	finished := make(chan struct{})
	handover := make(chan chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range writesEach {
				if w == 0 && i > 0 && i%handoverEvery == 0 {
					viewTaken := make(chan struct{})
					handover <- viewTaken
					<-viewTaken
				}
				name := fmt.Sprintf("n%d", (w*7+i)%names)
				var err error
				if i%5 == 4 {
					err = store.Delete(ctx, s, "item", name, 0)
					if errors.Is(err, store.ErrNotFound) {
						err = nil
					}
				} else {
					_, err = s.Txn(ctx, put("item", name, fmt.Sprintf(`{"w":%d,"i":%d}`, w, i)))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(finished) }()

	type view struct {
		state map[string]store.Record
		rev   int64
		ch    <-chan store.Event
	}
	var views []view
	takeView := func() {
		recs, rev := mustList(t, s, "item")
		ch, err := s.Watch(ctx, "item", rev)
		if err != nil {
			t.Fatalf("Watch from List's revision %d: %v", rev, err)
		}
		state := map[string]store.Record{}
		for _, r := range recs {
			state[r.Name] = r
		}
		views = append(views, view{state, rev, ch})
	}
	// Take views back to back (up to 50 of them) and whenever writer 0 waits for one, until the
	// writers are done.
	now := make(chan struct{})
	close(now)
	for writing := true; writing; {
		eager := now // ready at once: take a view without waiting
		if len(views) >= 50 {
			eager = nil // never ready: wait for writer 0 or the end
		}
		select {
		case <-finished:
			writing = false
		case viewTaken := <-handover:
			takeView()
			close(viewTaken)
		case <-eager:
			takeView()
		}
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	final, finalRev := mustList(t, s, "item")
	want := snapshotOf(final)
	midway := 0
	for _, v := range views {
		if v.rev > 0 && v.rev < finalRev {
			midway++
		}
	}
	if wantMidway := (writesEach - 1) / handoverEvery; midway < wantMidway {
		t.Errorf("%d views were taken while the writers ran, want at least %d", midway, wantMidway)
	}

	for i, v := range views {
		// Every write here is a one-op Txn, so each revision after the list's brings one event.
		for last := v.rev; last < finalRev; {
			e := next(t, v.ch)
			if e.Record.ResourceVersion <= last || e.Record.ResourceVersion > finalRev {
				t.Fatalf("view %d (listed at %d): event at version %d after %d, want one after it, up to %d", i, v.rev, e.Record.ResourceVersion, last, finalRev)
			}
			last = e.Record.ResourceVersion
			if e.Type == store.Deleted {
				delete(v.state, e.Record.Name)
			} else {
				v.state[e.Record.Name] = e.Record
			}
		}
		var recs []store.Record
		for _, r := range v.state {
			recs = append(recs, r)
		}
		slices.SortFunc(recs, func(a, b store.Record) int { return strings.Compare(a.Name, b.Name) })
		if got := snapshotOf(recs); got != want {
			t.Errorf("view %d (listed at %d): list + events =\n%s\nwant\n%s", i, v.rev, got, want)
		}
	}
	t.Logf("%d list+watch views, %d of them taken while %d writers ran, up to revision %d", len(views), midway, writers, finalRev)
}
