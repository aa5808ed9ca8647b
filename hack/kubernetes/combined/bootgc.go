package main

import (
	"os"
	"runtime/debug"
	"strconv"
	"time"
)

// While the node boots, every component's heap grows from nothing to its working size (about
// 80 MB together). At the steady GOGC of 25 the collector runs each time the heap has grown by a
// quarter, and a CPU profile of a boot put it at 22% of kube-combined's CPU while both cores were
// busy. bootGCPercent lets the heap grow fivefold between collections for the first bootGCWindow
// of the process; then the steady GOGC is back and the free memory is given back to the system at
// once. What stays is the boot's fragmentation: 32 MB more of the idle process's own memory, for
// a median 0.34 s less to the app's first answer over 18 alternating creates, less than a boot
// moves from one to the next on the machine measured (docs/benchmarks/instance.md).
const (
	bootGCPercent = 400
	bootGCWindow  = 15 * time.Second
)

// bootGC applies bootGCPercent for bootGCWindow when the steady GOGC (the environment's, or Go's
// default 100) is below it. GOGC=off is left as it is.
func bootGC() {
	steady := 100
	if v := os.Getenv("GOGC"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return // off, or a value the runtime ignores too
		}
		steady = n
	}
	if steady >= bootGCPercent {
		return
	}
	debug.SetGCPercent(bootGCPercent)
	time.AfterFunc(bootGCWindow, func() {
		debug.SetGCPercent(steady)
		debug.FreeOSMemory()
	})
}
