// How often the instance's processes wake: each process's context switches over the idle window,
// summed over its threads. An idle process does little per wakeup, and what one wakeup costs in
// CPU depends on the machine (a quiet virtual machine's cores sleep deeper, and wake slower, than
// a busy one's), so the wakeups tell the work from the machine where the CPU figure cannot.

package main

import (
	"github.com/prometheus/procfs"
)

// switches are a process's context switches, summed over its threads: voluntary ones (a thread
// blocked: on a timer, a lock, a socket; each is a wakeup later) and involuntary ones (a thread
// preempted while it could run: the machine's contention, not the process's work).
type switches struct {
	voluntary, involuntary int64
}

// procSwitches reads the context switches of every thread of process pid from
// /proc/<pid>/task/*/status (procfs). Threads that ended are not counted (Go's runtime seldom
// ends one).
func procSwitches(pid int) (switches, bool) {
	threads, err := procfs.AllThreads(pid)
	if err != nil || len(threads) == 0 {
		return switches{}, false
	}
	var sum switches
	for _, t := range threads {
		st, err := t.NewStatus()
		if err != nil {
			continue // the thread ended meanwhile
		}
		sum.voluntary += int64(st.VoluntaryCtxtSwitches)
		sum.involuntary += int64(st.NonVoluntaryCtxtSwitches)
	}
	return sum, true
}

// since is what s counts beyond an earlier reading; a count that went down (a thread ended) is
// taken as zero.
func (s switches) since(earlier switches) switches {
	return switches{voluntary: max(s.voluntary-earlier.voluntary, 0), involuntary: max(s.involuntary-earlier.involuntary, 0)}
}
