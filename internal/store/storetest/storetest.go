// Package storetest is the conformance suite of store.Store: every implementation runs Run from its
// own tests, so that the controller and the API server can rely on the contract written in package
// store rather than on one implementation's habits.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/store"
)

// waitTimeout bounds every wait for an event or a closed channel. Generous, because the race
// detector and a busy machine slow everything down; a passing run never waits for it.
const waitTimeout = 20 * time.Second

// Run runs the suite. newStore returns an empty store and arranges for it to be closed when the
// test ends (closing twice must be harmless: some tests close it themselves).
func Run(t *testing.T, newStore func(t *testing.T) store.Store) {
	tests := []struct {
		name string
		run  func(*testing.T, func(*testing.T) store.Store)
	}{
		{"WriteErrors", testWriteErrors},
		{"GetReturnsTheWrite", testGetReturnsTheWrite},
		{"List", testList},
		{"TxnAllOrNothing", testTxnAllOrNothing},
		{"TxnOpsSeeEarlierOps", testTxnOpsSeeEarlierOps},
		{"InvalidOps", testInvalidOps},
		{"ResourceVersionsIncrease", testResourceVersionsIncrease},
		{"ValuesAreCopied", testValuesAreCopied},
		{"ConcurrentConflictingUpdates", testConcurrentConflictingUpdates},
		{"WatchReplayThenLive", testWatchReplayThenLive},
		{"WatchEvents", testWatchEvents},
		{"WatchKindFilter", testWatchKindFilter},
		{"WatchFromFutureRevision", testWatchFromFutureRevision},
		{"WatchCancel", testWatchCancel},
		{"Close", testClose},
		{"WatchCompacted", testWatchCompacted},
		{"WatchSlowConsumerDropped", testWatchSlowConsumerDropped},
		{"ListThenWatchHasNoGap", testListThenWatchHasNoGap},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore) })
	}
}

func testWriteErrors(t *testing.T, newStore func(*testing.T) store.Store) {
	// Each case starts from a store holding fleet/web and runs one op on it; version says which
	// resource version the op requires: none, the stored one, or an older one.
	const (
		anyVersion = iota
		storedVersion
		staleVersion
	)
	tests := []struct {
		name    string
		op      store.OpType
		key     string
		version int
		wantErr error
	}{
		{"create new", store.OpCreate, "api", anyVersion, nil},
		{"create existing", store.OpCreate, "web", anyVersion, store.ErrExists},
		{"update", store.OpUpdate, "web", anyVersion, nil},
		{"update at stored version", store.OpUpdate, "web", storedVersion, nil},
		{"update at stale version", store.OpUpdate, "web", staleVersion, store.ErrConflict},
		{"update missing", store.OpUpdate, "api", anyVersion, store.ErrNotFound},
		{"update missing at a version", store.OpUpdate, "api", staleVersion, store.ErrNotFound},
		{"put new", store.OpPut, "api", anyVersion, nil},
		{"put existing", store.OpPut, "web", anyVersion, nil},
		{"put at stored version", store.OpPut, "web", storedVersion, nil},
		{"put at stale version", store.OpPut, "web", staleVersion, store.ErrConflict},
		{"put missing at a version", store.OpPut, "api", staleVersion, store.ErrNotFound},
		{"delete", store.OpDelete, "web", anyVersion, nil},
		{"delete at stored version", store.OpDelete, "web", storedVersion, nil},
		{"delete at stale version", store.OpDelete, "web", staleVersion, store.ErrConflict},
		{"delete missing", store.OpDelete, "api", anyVersion, store.ErrNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			s := newStore(t)
			mustTxn(t, s, store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", Value: []byte(`{"v":0}`)})
			web := mustTxn(t, s, store.Op{Type: store.OpUpdate, Kind: "fleet", Name: "web", Value: []byte(`{"v":1}`)})[0]
			op := store.Op{Type: tt.op, Kind: "fleet", Name: tt.key, Value: []byte(`{"v":2}`)}
			switch tt.version {
			case storedVersion:
				op.ResourceVersion = web.ResourceVersion
			case staleVersion:
				op.ResourceVersion = web.ResourceVersion - 1
			}
			_, revBefore := mustList(t, s, "fleet")

			recs, err := s.Txn(ctx, op)

			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Txn(%s fleet/%s) error = %v, want %v", tt.op, tt.key, err, tt.wantErr)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "fleet/"+tt.key) {
					t.Errorf("error %q does not name fleet/%s", err, tt.key)
				}
				if _, rev := mustList(t, s, "fleet"); rev != revBefore {
					t.Errorf("a failed write moved the revision from %d to %d", revBefore, rev)
				}
				return
			}
			if len(recs) != 1 || recs[0].ResourceVersion != revBefore+1 {
				t.Fatalf("Txn returned %+v, want one record at version %d", recs, revBefore+1)
			}
			got, err := s.Get(ctx, "fleet", tt.key)
			if tt.op == store.OpDelete {
				if !errors.Is(err, store.ErrNotFound) {
					t.Fatalf("Get after delete: error = %v, want ErrNotFound", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if string(got.Value) != `{"v":2}` || got.ResourceVersion != recs[0].ResourceVersion {
				t.Errorf("Get = %s at %d, want {\"v\":2} at %d", got.Value, got.ResourceVersion, recs[0].ResourceVersion)
			}
		})
	}
}

func testGetReturnsTheWrite(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	if _, err := s.Get(ctx, "fleet", "web"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("Get on an empty store: error = %v, want ErrNotFound", err)
	}
	created, err := store.Create(ctx, s, "fleet", "web", []byte(`{"replicas":3}`))
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	want := store.Record{Kind: "fleet", Name: "web", Value: []byte(`{"replicas":3}`), ResourceVersion: created.ResourceVersion}
	if !equalRecord(created, want) || created.ResourceVersion <= 0 {
		t.Errorf("Create returned %+v, want %+v with a positive version", created, want)
	}
	got, err := s.Get(ctx, "fleet", "web")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if !equalRecord(got, want) {
		t.Errorf("Get = %+v, want %+v", got, want)
	}
	if _, err := s.Get(ctx, "instance", "web"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get of the same name in another kind: error = %v, want ErrNotFound", err)
	}
}

func testList(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	for _, name := range []string{"c", "a", "b", "a-1", "B"} {
		mustTxn(t, s, store.Op{Type: store.OpCreate, Kind: "instance", Name: name, Value: []byte(`"` + name + `"`)})
	}
	last := mustTxn(t, s, store.Op{Type: store.OpCreate, Kind: "fleet", Name: "x", Value: []byte(`{}`)})[0]

	tests := []struct {
		kind      string
		wantNames []string
	}{
		{"instance", []string{"B", "a", "a-1", "b", "c"}},
		{"fleet", []string{"x"}},
		{"nodeimage", nil},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			recs, rev := mustList(t, s, tt.kind)
			if rev != last.ResourceVersion {
				t.Errorf("List revision = %d, want the latest write's %d", rev, last.ResourceVersion)
			}
			var names []string
			for _, r := range recs {
				names = append(names, r.Name)
				if r.Kind != tt.kind {
					t.Errorf("record %s has kind %q, want %q", r.Name, r.Kind, tt.kind)
				}
			}
			if !slices.Equal(names, tt.wantNames) {
				t.Errorf("List(%s) names = %q, want %q", tt.kind, names, tt.wantNames)
			}
		})
	}
}

func testTxnAllOrNothing(t *testing.T, newStore func(*testing.T) store.Store) {
	// Each case runs on a store holding fleet/web and instance/web-1; its transaction writes some
	// keys successfully before (or after) one op fails.
	tests := []struct {
		name    string
		ops     []store.Op
		wantErr error
		failing string
	}{
		{
			name: "last op exists",
			ops: []store.Op{
				{Type: store.OpCreate, Kind: "instance", Name: "web-2", Value: []byte(`2`)},
				{Type: store.OpUpdate, Kind: "fleet", Name: "web", Value: []byte(`"changed"`)},
				{Type: store.OpCreate, Kind: "instance", Name: "web-1", Value: []byte(`1`)},
			},
			wantErr: store.ErrExists,
			failing: "instance/web-1",
		},
		{
			name: "first op missing",
			ops: []store.Op{
				{Type: store.OpDelete, Kind: "instance", Name: "web-9"},
				{Type: store.OpCreate, Kind: "instance", Name: "web-2", Value: []byte(`2`)},
			},
			wantErr: store.ErrNotFound,
			failing: "instance/web-9",
		},
		{
			name: "middle op conflicts",
			ops: []store.Op{
				{Type: store.OpDelete, Kind: "instance", Name: "web-1"},
				{Type: store.OpPut, Kind: "fleet", Name: "web", Value: []byte(`"changed"`), ResourceVersion: 1 << 40},
				{Type: store.OpCreate, Kind: "nodeimage", Name: "base", Value: []byte(`{}`)},
			},
			wantErr: store.ErrConflict,
			failing: "fleet/web",
		},
		{
			name: "op fails on an earlier op's write",
			ops: []store.Op{
				{Type: store.OpCreate, Kind: "instance", Name: "web-2", Value: []byte(`2`)},
				{Type: store.OpCreate, Kind: "instance", Name: "web-2", Value: []byte(`2`)},
			},
			wantErr: store.ErrExists,
			failing: "instance/web-2",
		},
		{
			name: "many writes then one failure",
			ops: append(manyPuts("instance", 500),
				store.Op{Type: store.OpUpdate, Kind: "instance", Name: "missing", Value: []byte(`{}`)}),
			wantErr: store.ErrNotFound,
			failing: "instance/missing",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			mustTxn(t, s,
				store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", Value: []byte(`"original"`)},
				store.Op{Type: store.OpCreate, Kind: "instance", Name: "web-1", Value: []byte(`1`)})
			before := snapshot(t, s, "fleet", "instance", "nodeimage")
			_, revBefore := mustList(t, s, "fleet")

			recs, err := s.Txn(context.Background(), tt.ops...)

			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Txn error = %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.failing) {
				t.Errorf("error %q does not name the failing op's %s", err, tt.failing)
			}
			if recs != nil {
				t.Errorf("a failed Txn returned records %+v", recs)
			}
			if after := snapshot(t, s, "fleet", "instance", "nodeimage"); after != before {
				t.Errorf("a failed Txn changed the store:\nbefore: %s\nafter:  %s", before, after)
			}
			if _, rev := mustList(t, s, "fleet"); rev != revBefore {
				t.Errorf("a failed Txn moved the revision from %d to %d", revBefore, rev)
			}
		})
	}
}

func testTxnOpsSeeEarlierOps(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	ctx := context.Background()
	_, rev0 := mustList(t, s, "fleet")
	recs := mustTxn(t, s,
		store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", Value: []byte(`1`)},
		store.Op{Type: store.OpUpdate, Kind: "fleet", Name: "web", Value: []byte(`2`), ResourceVersion: rev0 + 1},
		store.Op{Type: store.OpCreate, Kind: "fleet", Name: "tmp", Value: []byte(`"tmp"`)},
		store.Op{Type: store.OpDelete, Kind: "fleet", Name: "tmp"},
		store.Op{Type: store.OpPut, Kind: "instance", Name: "web-1", Value: []byte(`3`)},
	)
	want := []store.Record{
		{Kind: "fleet", Name: "web", Value: []byte(`1`), ResourceVersion: rev0 + 1},
		{Kind: "fleet", Name: "web", Value: []byte(`2`), ResourceVersion: rev0 + 2},
		{Kind: "fleet", Name: "tmp", Value: []byte(`"tmp"`), ResourceVersion: rev0 + 3},
		// A delete returns the last value, stamped with the delete's revision.
		{Kind: "fleet", Name: "tmp", Value: []byte(`"tmp"`), ResourceVersion: rev0 + 4},
		{Kind: "instance", Name: "web-1", Value: []byte(`3`), ResourceVersion: rev0 + 5},
	}
	if !equalRecords(recs, want) {
		t.Errorf("Txn returned\n%v\nwant\n%v", recs, want)
	}
	if got, err := s.Get(ctx, "fleet", "web"); err != nil || string(got.Value) != "2" {
		t.Errorf("Get(fleet/web) = %s, %v; want 2", got.Value, err)
	}
	if _, err := s.Get(ctx, "fleet", "tmp"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(fleet/tmp) error = %v, want ErrNotFound", err)
	}
	if _, rev := mustList(t, s, "fleet"); rev != rev0+5 {
		t.Errorf("revision after a 5-op Txn = %d, want %d", rev, rev0+5)
	}
	if recs, err := s.Txn(ctx); err != nil || len(recs) != 0 {
		t.Errorf("empty Txn = %v, %v; want no records and no error", recs, err)
	}
}

func testInvalidOps(t *testing.T, newStore func(*testing.T) store.Store) {
	tests := []struct {
		name string
		op   store.Op
	}{
		{"empty kind", store.Op{Type: store.OpCreate, Name: "web", Value: []byte(`{}`)}},
		{"empty name", store.Op{Type: store.OpCreate, Kind: "fleet", Value: []byte(`{}`)}},
		{"unknown type", store.Op{Type: store.OpType(42), Kind: "fleet", Name: "web"}},
		{"create at a version", store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", ResourceVersion: 3}},
		{"negative version", store.Op{Type: store.OpUpdate, Kind: "fleet", Name: "web", ResourceVersion: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			good := store.Op{Type: store.OpCreate, Kind: "fleet", Name: "ok", Value: []byte(`{}`)}
			_, err := s.Txn(context.Background(), good, tt.op)
			if err == nil {
				t.Fatal("Txn accepted an invalid op")
			}
			if store.IsOpError(err) {
				t.Errorf("error %v wraps a write outcome; an invalid op is the caller's mistake", err)
			}
			if recs, _ := mustList(t, s, "fleet"); len(recs) != 0 {
				t.Errorf("a rejected Txn stored %v", recs)
			}
		})
	}
}

func testResourceVersionsIncrease(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	var last int64
	check := func(what string, rv int64) {
		t.Helper()
		if rv <= last {
			t.Fatalf("%s: resource version %d after %d, want it to grow", what, rv, last)
		}
		last = rv
	}
	for i := range 20 {
		name := "f" + strconv.Itoa(i%3)
		rec, err := store.Create(ctx, s, "fleet", name, []byte(`0`))
		if errors.Is(err, store.ErrExists) {
			rec, err = store.Update(ctx, s, "fleet", name, []byte(strconv.Itoa(i)), 0)
		}
		if err != nil {
			t.Fatal(err)
		}
		check("write "+strconv.Itoa(i), rec.ResourceVersion)
		if i%5 == 4 {
			recs := mustTxn(t, s, store.Op{Type: store.OpDelete, Kind: "fleet", Name: name})
			check("delete", recs[0].ResourceVersion)
		}
	}
	if _, rev := mustList(t, s, "fleet"); rev != last {
		t.Errorf("List revision = %d, want the last write's %d", rev, last)
	}
}

func testValuesAreCopied(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	buf := []byte(`{"a":1}`)
	if _, err := store.Create(ctx, s, "fleet", "web", buf); err != nil {
		t.Fatal(err)
	}
	copy(buf, `{"b":2}`) // a caller reusing its buffer
	got, err := s.Get(ctx, "fleet", "web")
	if err != nil {
		t.Fatal(err)
	}
	copy(got.Value, `XXXXXXX`) // a caller scribbling on what it read
	if again, _ := s.Get(ctx, "fleet", "web"); string(again.Value) != `{"a":1}` {
		t.Errorf("stored value = %s, want {\"a\":1}: the store shares memory with its callers", again.Value)
	}
}

func testConcurrentConflictingUpdates(t *testing.T, newStore func(*testing.T) store.Store) {
	// workers goroutines each add 1 to a counter increments times by read-modify-write, retrying on
	// ErrConflict. All of them read the counter before any writes it for the first time, so the
	// first round is bound to conflict: the test proves the retry path runs, not just that it exists.
	const workers, increments = 8, 25
	ctx := context.Background()
	s := newStore(t)
	if _, err := store.Create(ctx, s, "counter", "c", []byte("0")); err != nil {
		t.Fatal(err)
	}
	var (
		conflicts atomic.Int64
		readAll   sync.WaitGroup
		release   = make(chan struct{})
		wg        sync.WaitGroup
		errs      = make(chan error, workers)
	)
	readAll.Add(workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range increments {
				for attempt := 0; ; attempt++ {
					rec, err := s.Get(ctx, "counter", "c")
					if err != nil {
						errs <- fmt.Errorf("worker %d: %w", w, err)
						return
					}
					n, err := strconv.Atoi(string(rec.Value))
					if err != nil {
						errs <- fmt.Errorf("worker %d: counter value %q: %w", w, rec.Value, err)
						return
					}
					if i == 0 && attempt == 0 {
						readAll.Done()
						<-release
					}
					_, err = store.Update(ctx, s, "counter", "c", []byte(strconv.Itoa(n+1)), rec.ResourceVersion)
					if errors.Is(err, store.ErrConflict) {
						conflicts.Add(1)
						continue
					}
					if err != nil {
						errs <- fmt.Errorf("worker %d: %w", w, err)
						return
					}
					break
				}
			}
		}()
	}
	readAll.Wait()
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	rec, err := s.Get(ctx, "counter", "c")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(rec.Value), strconv.Itoa(workers*increments); got != want {
		t.Errorf("counter = %s, want %s: an update was lost", got, want)
	}
	if conflicts.Load() < workers-1 {
		t.Errorf("%d conflicts, want at least %d: concurrent writers of one version must conflict", conflicts.Load(), workers-1)
	}
	t.Logf("%d increments by %d workers, %d conflicts retried", workers*increments, workers, conflicts.Load())
}

func testWatchReplayThenLive(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	a := mustTxn(t, s, put("fleet", "a", "1"))[0]
	mustTxn(t, s, put("fleet", "b", "2"), put("fleet", "c", "3"))

	ch, err := s.Watch(ctx, "fleet", a.ResourceVersion)
	if err != nil {
		t.Fatal(err)
	}
	mustTxn(t, s, put("fleet", "d", "4"))
	mustTxn(t, s, put("fleet", "a", "5"))

	var got []string
	for range 4 {
		e := next(t, ch)
		got = append(got, fmt.Sprintf("%s %s=%s@%d", e.Type, e.Record.Name, e.Record.Value, e.Record.ResourceVersion-a.ResourceVersion))
	}
	want := []string{"Added b=2@1", "Added c=3@2", "Added d=4@3", "Modified a=5@4"}
	if !slices.Equal(got, want) {
		t.Errorf("events (versions relative to a's) = %q, want %q", got, want)
	}
}

func testWatchEvents(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	_, rev := mustList(t, s, "fleet")
	ch, err := s.Watch(ctx, "", rev)
	if err != nil {
		t.Fatal(err)
	}
	mustTxn(t, s,
		store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", Value: []byte(`1`)},
		store.Op{Type: store.OpPut, Kind: "instance", Name: "web-1", Value: []byte(`2`)})
	mustTxn(t, s, store.Op{Type: store.OpUpdate, Kind: "fleet", Name: "web", Value: []byte(`3`)})
	mustTxn(t, s, store.Op{Type: store.OpPut, Kind: "instance", Name: "web-1", Value: []byte(`4`)})
	mustTxn(t, s, store.Op{Type: store.OpDelete, Kind: "fleet", Name: "web"})

	want := []store.Event{
		{Type: store.Added, Record: store.Record{Kind: "fleet", Name: "web", Value: []byte(`1`), ResourceVersion: rev + 1}},
		{Type: store.Added, Record: store.Record{Kind: "instance", Name: "web-1", Value: []byte(`2`), ResourceVersion: rev + 2}},
		{Type: store.Modified, Record: store.Record{Kind: "fleet", Name: "web", Value: []byte(`3`), ResourceVersion: rev + 3}},
		{Type: store.Modified, Record: store.Record{Kind: "instance", Name: "web-1", Value: []byte(`4`), ResourceVersion: rev + 4}},
		{Type: store.Deleted, Record: store.Record{Kind: "fleet", Name: "web", Value: []byte(`3`), ResourceVersion: rev + 5}},
	}
	for i, w := range want {
		if e := next(t, ch); e.Type != w.Type || !equalRecord(e.Record, w.Record) {
			t.Errorf("event %d = %v %v, want %v %v", i, e.Type, e.Record, w.Type, w.Record)
		}
	}
}

func testWatchKindFilter(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	_, rev := mustList(t, s, "fleet")
	fleets, err := s.Watch(ctx, "fleet", rev)
	if err != nil {
		t.Fatal(err)
	}
	instances, err := s.Watch(ctx, "instance", rev)
	if err != nil {
		t.Fatal(err)
	}
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

func testWatchFromFutureRevision(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	_, rev := mustList(t, s, "fleet")
	ch, err := s.Watch(context.Background(), "fleet", rev+2)
	if err != nil {
		t.Fatalf("Watch from a revision not reached yet: %v", err)
	}
	mustTxn(t, s, put("fleet", "a", "1"), put("fleet", "b", "2"), put("fleet", "c", "3"))
	if e := next(t, ch); e.Record.Name != "c" || e.Record.ResourceVersion != rev+3 {
		t.Errorf("first event = %v, want fleet/c at %d", e.Record, rev+3)
	}
}

func testWatchCancel(t *testing.T, newStore func(*testing.T) store.Store) {
	s := newStore(t)
	_, rev := mustList(t, s, "fleet")
	ctx, cancel := context.WithCancel(context.Background())
	idle, err := s.Watch(ctx, "fleet", rev)
	if err != nil {
		t.Fatal(err)
	}
	mustTxn(t, s, put("fleet", "a", "1"))
	busy, err := s.Watch(ctx, "fleet", rev) // has an event waiting that nobody reads
	if err != nil {
		t.Fatal(err)
	}
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

func testClose(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	mustTxn(t, s, put("fleet", "a", "1"))
	_, rev := mustList(t, s, "fleet")
	ch, err := s.Watch(ctx, "", rev)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitClosed(t, ch)
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	calls := []struct {
		name string
		call func() error
	}{
		{"Get", func() error { _, err := s.Get(ctx, "fleet", "a"); return err }},
		{"List", func() error { _, _, err := s.List(ctx, "fleet"); return err }},
		{"Txn", func() error { _, err := s.Txn(ctx, put("fleet", "b", "2")); return err }},
		{"Watch", func() error { _, err := s.Watch(ctx, "", rev); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, store.ErrClosed) {
				t.Errorf("%s after Close: error = %v, want ErrClosed", c.name, err)
			}
		})
	}
}

func testWatchCompacted(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	_, rev0 := mustList(t, s, "instance")
	writeMany(t, s, store.DefaultWatchHistory+100)
	_, rev := mustList(t, s, "instance")

	if _, err := s.Watch(ctx, "instance", rev0); !errors.Is(err, store.ErrCompacted) {
		t.Errorf("Watch from before the history: error = %v, want ErrCompacted", err)
	}
	since := rev - store.DefaultWatchHistory/2
	ch, err := s.Watch(ctx, "instance", since)
	if err != nil {
		t.Fatalf("Watch from within the history: %v", err)
	}
	if e := next(t, ch); e.Record.ResourceVersion != since+1 {
		t.Errorf("first replayed event at %d, want %d", e.Record.ResourceVersion, since+1)
	}
}

func testWatchSlowConsumerDropped(t *testing.T, newStore func(*testing.T) store.Store) {
	ctx := context.Background()
	s := newStore(t)
	_, rev := mustList(t, s, "instance")
	slow, err := s.Watch(ctx, "instance", rev)
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads slow while twice the history is written: the writes must not wait for it.
	writeMany(t, s, 2*store.DefaultWatchHistory)

	// What slow got is an unbroken run of events from the start, and then its channel closes.
	want := rev + 1
	deadline := time.After(waitTimeout)
	for done := false; !done; {
		select {
		case e, ok := <-slow:
			if !ok {
				done = true
				break
			}
			if e.Record.ResourceVersion != want {
				t.Fatalf("slow watcher got version %d, want %d", e.Record.ResourceVersion, want)
			}
			want++
		case <-deadline:
			t.Fatalf("the slow watcher's channel is still open after %d events", want-rev-1)
		}
	}
	if want-rev-1 >= 2*store.DefaultWatchHistory {
		t.Errorf("the slow watcher received all %d events: it was not dropped", want-rev-1)
	}
	t.Logf("slow watcher received %d events before it was dropped", want-rev-1)
}

func testListThenWatchHasNoGap(t *testing.T, newStore func(*testing.T) store.Store) {
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
		for rev := v.rev + 1; rev <= finalRev; rev++ {
			e := next(t, v.ch)
			if e.Record.ResourceVersion != rev {
				t.Fatalf("view %d (listed at %d): event at version %d, want %d", i, v.rev, e.Record.ResourceVersion, rev)
			}
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

// writeMany writes n changes to kind instance in transactions of up to 1,000 ops.
func writeMany(t *testing.T, s store.Store, n int) {
	t.Helper()
	for done := 0; done < n; {
		ops := manyPuts("instance", min(1000, n-done))
		mustTxn(t, s, ops...)
		done += len(ops)
	}
}

func manyPuts(kind string, n int) []store.Op {
	ops := make([]store.Op, n)
	for i := range ops {
		ops[i] = put(kind, "i"+strconv.Itoa(i), `{"n":`+strconv.Itoa(i)+`}`)
	}
	return ops
}

func put(kind, name, value string) store.Op {
	return store.Op{Type: store.OpPut, Kind: kind, Name: name, Value: []byte(value)}
}

func mustTxn(t *testing.T, s store.Store, ops ...store.Op) []store.Record {
	t.Helper()
	recs, err := s.Txn(context.Background(), ops...)
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	return recs
}

func mustList(t *testing.T, s store.Store, kind string) ([]store.Record, int64) {
	t.Helper()
	recs, rev, err := s.List(context.Background(), kind)
	if err != nil {
		t.Fatalf("List(%s): %v", kind, err)
	}
	return recs, rev
}

// snapshot renders every record of the kinds, for comparing whole stores.
func snapshot(t *testing.T, s store.Store, kinds ...string) string {
	t.Helper()
	var all []store.Record
	for _, k := range kinds {
		recs, _ := mustList(t, s, k)
		all = append(all, recs...)
	}
	return snapshotOf(all)
}

func snapshotOf(recs []store.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%s/%s@%d=%s\n", r.Kind, r.Name, r.ResourceVersion, r.Value)
	}
	return b.String()
}

func equalRecord(a, b store.Record) bool {
	return a.Kind == b.Kind && a.Name == b.Name && bytes.Equal(a.Value, b.Value) && a.ResourceVersion == b.ResourceVersion
}

func equalRecords(a, b []store.Record) bool {
	return slices.EqualFunc(a, b, equalRecord)
}

// next returns the next event of ch, failing the test if ch closes or nothing comes.
func next(t *testing.T, ch <-chan store.Event) store.Event {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatal("watch channel closed, want an event")
		}
		return e
	case <-time.After(waitTimeout):
		t.Fatalf("no event within %s", waitTimeout)
	}
	return store.Event{}
}

// waitClosed drains ch until it closes, failing the test if it stays open.
func waitClosed(t *testing.T, ch <-chan store.Event) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("watch channel still open after %s", waitTimeout)
		}
	}
}
