// The machine-wide lock that tests and programs booting real instances take, one at a time.

package localtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// exclusiveLock is the machine-wide lock tests take before booting real instances.
const exclusiveLock = "/run/herd-real-instance-tests.lock"

// Exclusive makes the calling test the only one booting real instances on this machine until it
// ends. Test packages run in parallel; real instances from several of them at once would compete
// for the two cores (failing tests on timing, not on behaviour) and would show up in each other's
// leak checks. Call it before Take.
func Exclusive(t testing.TB) {
	t.Helper()
	unlock, err := Lock(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unlock)
}

// Lock takes the machine-wide lock of Exclusive for a program that boots real instances outside
// a test (make conformance, make bench-instance), waiting until no one else holds it or ctx
// ends; unlock releases it.
func Lock(ctx context.Context) (unlock func(), err error) {
	return lockFile(ctx, exclusiveLock)
}

// lockPoll is how often Lock tries the lock while another holds it.
const lockPoll = 200 * time.Millisecond

// lockFile takes an exclusive flock(2) of the file at path (made if missing). It tries without
// blocking, again every lockPoll: a flock that blocks is not ended by a signal Go's runtime
// handles (signal.NotifyContext), so a program told to stop while it waited went on waiting.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	err = wait.PollUntilContextCancel(ctx, lockPoll, true, func(context.Context) (bool, error) {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if errors.Is(err, syscall.EWOULDBLOCK) || errors.Is(err, syscall.EINTR) {
			return false, nil
		}
		return err == nil, err
	})
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
