// The checks of Txn: all of its ops or none, later ops seeing earlier ones, invalid ops refused, and
// optimistic concurrency under conflicting writers.

package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"herd.dev/herd/internal/store"
)

func testTxnAllOrNothing(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
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

func testTxnOpsSeeEarlierOps(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	s := newStore(t)
	ctx := context.Background()
	_, rev0 := mustList(t, s, "fleet")
	recs := mustTxn(t, s,
		store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", Value: []byte(`1`)},
		store.Op{Type: store.OpUpdate, Kind: "fleet", Name: "web", Value: []byte(`2`)},
		store.Op{Type: store.OpCreate, Kind: "fleet", Name: "tmp", Value: []byte(`"tmp"`)},
		store.Op{Type: store.OpDelete, Kind: "fleet", Name: "tmp"},
		store.Op{Type: store.OpPut, Kind: "instance", Name: "web-1", Value: []byte(`3`)},
	)
	want := []string{
		"fleet/web=1",
		"fleet/web=2",
		`fleet/tmp="tmp"`,
		// A delete returns the last value.
		`fleet/tmp="tmp"`,
		"instance/web-1=3",
	}
	var got []string
	last := rev0
	for i, r := range recs {
		got = append(got, fmt.Sprintf("%s/%s=%s", r.Kind, r.Name, r.Value))
		// Each op's revision follows the store's before the Txn, in op order: its own (bolt,
		// memory) or the Txn's (etcd).
		if r.ResourceVersion < last || r.ResourceVersion <= rev0 {
			t.Errorf("record %d at version %d, want one after %d and not before the previous op's %d", i, r.ResourceVersion, rev0, last)
		}
		last = r.ResourceVersion
	}
	if !slices.Equal(got, want) {
		t.Errorf("Txn returned\n%q\nwant\n%q", got, want)
	}
	if got, err := s.Get(ctx, "fleet", "web"); err != nil || string(got.Value) != "2" {
		t.Errorf("Get(fleet/web) = %s, %v; want 2", got.Value, err)
	}
	if _, err := s.Get(ctx, "fleet", "tmp"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Get(fleet/tmp) error = %v, want ErrNotFound", err)
	}
	if _, rev := mustList(t, s, "fleet"); rev != last {
		t.Errorf("revision after a 5-op Txn = %d, want its last op's %d", rev, last)
	}
	if recs, err := s.Txn(ctx); err != nil || len(recs) != 0 {
		t.Errorf("empty Txn = %v, %v; want no records and no error", recs, err)
	}
}

func testInvalidOps(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	tests := []struct {
		name string
		op   store.Op
	}{
		{"empty kind", store.Op{Type: store.OpCreate, Name: "web", Value: []byte(`{}`)}},
		{"empty name", store.Op{Type: store.OpCreate, Kind: "fleet", Value: []byte(`{}`)}},
		{"unknown type", store.Op{Type: store.OpType(42), Kind: "fleet", Name: "web"}},
		{"create at a version", store.Op{Type: store.OpCreate, Kind: "fleet", Name: "web", ResourceVersion: 3}},
		{"negative version", store.Op{Type: store.OpUpdate, Kind: "fleet", Name: "web", ResourceVersion: -1}},
		// The only version this could match is the one the first op writes, unknown to the caller.
		{"version of the Txn's own write", store.Op{Type: store.OpUpdate, Kind: "fleet", Name: "ok", ResourceVersion: 1}},
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

func testConcurrentConflictingUpdates(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
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
