package statefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// FileLock is an exclusive flock(2) on a file. flock locks belong to an open file, so two
// lockers in one process exclude each other as two processes do, and a lock dies with its holder.
type FileLock struct{ f *os.File }

// Lock takes an exclusive lock on path, creating the file (0600) if needed, and waits for it
// while another holds it. If the file was removed or replaced while waiting (its directory was
// deleted), it locks the new file.
func Lock(path string) (*FileLock, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("open lock %s: %w", path, err)
		}
		if err := flock(f, syscall.LOCK_EX); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The holder before us may have removed the file (Delete removes the instance directory
		// with its lock): a lock on an unlinked file protects nothing, so lock the current one.
		held, err1 := f.Stat()
		cur, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, cur) {
			return &FileLock{f: f}, nil
		}
		f.Close()
		if err2 != nil && !errors.Is(err2, fs.ErrNotExist) {
			return nil, fmt.Errorf("lock %s: %w", path, err2)
		}
		if errors.Is(err2, fs.ErrNotExist) {
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
		}
	}
}

func flock(f *os.File, how int) error {
	for {
		err := syscall.Flock(int(f.Fd()), how)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

// IsLocked reports whether another holder has the lock on path (an existing file only).
func IsLocked(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if err := flock(f, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	_ = flock(f, syscall.LOCK_UN)
	return false
}

// Unlock gives the lock back; a nil or released lock is no error.
func (l *FileLock) Unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = flock(l.f, syscall.LOCK_UN)
	l.f.Close()
	l.f = nil
}
