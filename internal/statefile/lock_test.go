package statefile

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestFileLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "lock")
	a, err := Lock(path)
	if err != nil {
		t.Fatal(err)
	}
	// IsLocked tries a second lock on its own open file, in this same process.
	if !IsLocked(path) {
		t.Fatal("a second lock in the same process is not excluded (IsLocked = false while held)")
	}
	got := make(chan *FileLock)
	go func() {
		l, err := Lock(path)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	select {
	case <-got:
		t.Fatal("a waiting locker got the lock while it was held")
	case <-time.After(50 * time.Millisecond):
	}
	// The holder removes the file (as Delete removes an instance directory): the waiter must
	// end up holding a lock on a file that exists.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	a.Unlock()
	b := <-got
	defer b.Unlock()
	held, _ := b.f.Stat()
	cur, err := os.Stat(path)
	if err != nil || !os.SameFile(held, cur) {
		t.Fatalf("the waiter holds a lock on a removed file (%v)", err)
	}
	if IsLocked(filepath.Join(dir, "missing")) {
		t.Error("IsLocked of a missing file")
	}
}
