package main

import (
	"os"
	"testing"
	"time"
)

// The counts are read from every thread of a running process: this test's own, which blocks in a
// sleep and so switches voluntarily; and a later reading less an earlier one never goes below
// zero (a thread that ended takes its counts with it).
func TestSwitches(t *testing.T) {
	before, ok := procSwitches(os.Getpid())
	if !ok {
		t.Fatal("procSwitches of this test's process reported nothing")
	}
	time.Sleep(10 * time.Millisecond) // a blocked thread: a voluntary switch to count
	after, ok := procSwitches(os.Getpid())
	if !ok {
		t.Fatal("procSwitches of this test's process reported nothing")
	}
	if d := after.since(before); d.voluntary <= 0 {
		t.Errorf("voluntary switches over a sleep: %+v -> %+v, want more", before, after)
	}
	if d := (switches{voluntary: 1600, involuntary: 40}).since(switches{voluntary: 1500, involuntary: 42}); d != (switches{voluntary: 100}) {
		t.Errorf("since = %+v, want 100 voluntary and 0 involuntary", d)
	}
	if _, ok := procSwitches(-1); ok {
		t.Error("procSwitches of no process reported counts")
	}
}
