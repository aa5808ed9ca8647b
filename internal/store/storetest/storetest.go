// Package storetest is the conformance suite of store.Store: every implementation runs Run from its
// own tests, so that the controller and the API server can rely on the contract written in package
// store rather than on one implementation's habits.
//
// The checks are grouped by the part of the contract they cover: records.go (single-record reads
// and writes), txn.go (transactions and concurrent writers), watch.go (watches) and close.go
// (Close). This file holds Run, which lists them all, and the helpers they share.
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/store"
)

// waitTimeout bounds every wait for an event or a closed channel. Generous, because the race
// detector and a busy machine slow everything down; a passing run never waits for it.
const waitTimeout = 20 * time.Second

// Option adapts the suite to an implementation.
type Option func(*options)

type options struct {
	forget func(t *testing.T, s store.Store, rev int64)
}

// WithForget says how to make s forget the changes before revision rev, so that a watch from
// before them fails with ErrCompacted while one from rev still works: for etcd, a compaction at
// rev. The suite writes three changes before it asks to forget up to the last of them. Default:
// write store.DefaultWatchHistory-2 changes, which pushes the first of the three out of a
// store.Hub's history and keeps the others.
func WithForget(forget func(t *testing.T, s store.Store, rev int64)) Option {
	return func(o *options) { o.forget = forget }
}

// Run runs the suite. newStore returns an empty store and arranges for it to be closed when the
// test ends (closing twice must be harmless: some tests close it themselves).
func Run(t *testing.T, newStore func(t *testing.T) store.Store, opts ...Option) {
	o := options{forget: func(t *testing.T, s store.Store, _ int64) { writeMany(t, s, store.DefaultWatchHistory-2) }}
	for _, opt := range opts {
		opt(&o)
	}
	tests := []struct {
		name string
		run  func(*testing.T, func(*testing.T) store.Store, options)
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
		t.Run(tt.name, func(t *testing.T) { tt.run(t, newStore, o) })
	}
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

func mustWatch(t *testing.T, ctx context.Context, s store.Store, kind string, rev int64) <-chan store.Event {
	t.Helper()
	ch, err := s.Watch(ctx, kind, rev)
	if err != nil {
		t.Fatalf("Watch(%s, %d): %v", kind, rev, err)
	}
	return ch
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
