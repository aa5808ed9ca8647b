// The checks of single-record reads and writes: the errors each write op returns, Get and List, the
// resource versions writes assign and the copying of values in and out of the store.

package storetest

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"herd.dev/herd/internal/store"
)

func testWriteErrors(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
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
			if len(recs) != 1 || recs[0].ResourceVersion <= revBefore {
				t.Fatalf("Txn returned %+v, want one record at a version after %d", recs, revBefore)
			}
			if _, rev := mustList(t, s, "fleet"); rev != recs[0].ResourceVersion {
				t.Errorf("revision after the write = %d, want the write's %d", rev, recs[0].ResourceVersion)
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

func testGetReturnsTheWrite(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
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

func testList(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
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

func testResourceVersionsIncrease(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
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

func testValuesAreCopied(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
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
