package localtest

import (
	"fmt"
	"maps"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"testing"
)

// Go's testing package does not catch SIGINT or SIGTERM: a test binary interrupted (Ctrl-C on a
// benchmark, a CI job cancelled) dies at once, without running any t.Cleanup, and what its tests
// started (herd up, real instances, region networks) runs on with nobody to remove it.
// CleanupOnInterrupt closes that gap for the cleanups that matter.

// interrupts holds the cleanups to run on SIGINT or SIGTERM, by registration order.
var interrupts struct {
	mu       sync.Mutex
	catching bool
	next     int
	pending  map[int]func()
}

// CleanupOnInterrupt registers cleanup to run when the test ends, as t.Cleanup does, and also
// when the test binary gets SIGINT or SIGTERM first: then every pending cleanup runs, the latest
// registered first, and the binary exits with status 1. A cleanup runs once, whichever comes
// first; one the signal finds running is waited for.
func CleanupOnInterrupt(t testing.TB, cleanup func()) {
	var once sync.Once
	run := func() { once.Do(cleanup) }
	interrupts.mu.Lock()
	if !interrupts.catching {
		interrupts.catching = true
		interrupts.pending = map[int]func(){}
		signals := make(chan os.Signal, 1)
		signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
		go cleanUpOn(signals)
	}
	id := interrupts.next
	interrupts.next++
	interrupts.pending[id] = run
	interrupts.mu.Unlock()
	t.Cleanup(func() {
		run()
		interrupts.mu.Lock()
		delete(interrupts.pending, id)
		interrupts.mu.Unlock()
	})
}

// cleanUpOn waits for a signal, runs the pending cleanups and exits.
func cleanUpOn(signals <-chan os.Signal) {
	sig := <-signals
	interrupts.mu.Lock()
	ids := slices.Sorted(maps.Keys(interrupts.pending))
	runs := make([]func(), 0, len(ids))
	for _, id := range slices.Backward(ids) {
		runs = append(runs, interrupts.pending[id])
	}
	interrupts.mu.Unlock()
	fmt.Fprintf(os.Stderr, "%v: running the cleanups of %d test(s) before exiting\n", sig, len(runs))
	for _, run := range runs {
		run()
	}
	fmt.Fprintf(os.Stderr, "%v: cleaned up; exiting\n", sig)
	os.Exit(1)
}
