// The checks of Close: watches end, a second Close is harmless and every later call says ErrClosed.

package storetest

import (
	"context"
	"errors"
	"testing"

	"herd.dev/herd/internal/store"
)

func testClose(t *testing.T, newStore func(*testing.T) store.Store, _ options) {
	ctx := context.Background()
	s := newStore(t)
	mustTxn(t, s, put("fleet", "a", "1"))
	_, rev := mustList(t, s, "fleet")
	ch := mustWatch(t, ctx, s, "", rev)
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
