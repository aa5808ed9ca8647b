package main

import (
	"bufio"
	"strings"
	"testing"
)

// Both counts are read from a thread's status file, and a later reading less an earlier one
// never goes below zero (a thread that ended takes its counts with it).
func TestSwitches(t *testing.T) {
	status := "Name:\tetcd\nState:\tS (sleeping)\nThreads:\t12\nvoluntary_ctxt_switches:\t1500\nnonvoluntary_ctxt_switches:\t42\n"
	got := statusSwitches(bufio.NewScanner(strings.NewReader(status)))
	if want := (switches{voluntary: 1500, involuntary: 42}); got != want {
		t.Fatalf("statusSwitches = %+v, want %+v", got, want)
	}
	if d := (switches{voluntary: 1600, involuntary: 40}).since(got); d != (switches{voluntary: 100}) {
		t.Errorf("since = %+v, want 100 voluntary and 0 involuntary", d)
	}
	if _, ok := procSwitches(-1); ok {
		t.Error("procSwitches of no process reported counts")
	}
}
