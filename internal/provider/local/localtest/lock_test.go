package localtest

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"
)

func TestLockFileWaitsForTheHolderOrTheContext(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	unlock, err := lockFile(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}

	// Held: a waiter whose context ends gives up with the context's error.
	ctx, cancel := context.WithTimeout(t.Context(), 3*lockPoll)
	defer cancel()
	if _, err := lockFile(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("lock held by another: got %v, want the context's deadline", err)
	}

	// A waiter waits while it is held, and gets it once it is released.
	got := make(chan error, 1)
	go func() {
		unlockSecond, err := lockFile(t.Context(), path)
		if err == nil {
			unlockSecond()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("lock held by another: the waiter returned (%v)", err)
	case <-time.After(3 * lockPoll):
	}
	unlock()
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("lock released: got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock once it was released")
	}
}
