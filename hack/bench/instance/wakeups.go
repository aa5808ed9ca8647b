// How often the instance's processes wake: each process's context switches over the idle window,
// summed over its threads. An idle process does little per wakeup, and what one wakeup costs in
// CPU depends on the machine (a quiet virtual machine's cores sleep deeper, and wake slower, than
// a busy one's), so the wakeups tell the work from the machine where the CPU figure cannot.

package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// switches are a process's context switches, summed over its threads: voluntary ones (a thread
// blocked: on a timer, a lock, a socket; each is a wakeup later) and involuntary ones (a thread
// preempted while it could run: the machine's contention, not the process's work).
type switches struct {
	voluntary, involuntary int64
}

// procSwitches reads the context switches of every thread of process pid. Threads that ended are
// not counted (Go's runtime seldom ends one).
func procSwitches(pid int) (switches, bool) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	if err != nil || len(tasks) == 0 {
		return switches{}, false
	}
	var sum switches
	for _, t := range tasks {
		f, err := os.Open(t)
		if err != nil {
			continue // the thread ended meanwhile
		}
		s := statusSwitches(bufio.NewScanner(f))
		f.Close()
		sum.voluntary += s.voluntary
		sum.involuntary += s.involuntary
	}
	return sum, true
}

// statusSwitches reads voluntary_ctxt_switches and nonvoluntary_ctxt_switches from a
// /proc/<pid>/task/<tid>/status file.
func statusSwitches(sc *bufio.Scanner) switches {
	var s switches
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "voluntary_ctxt_switches":
			s.voluntary = n
		case "nonvoluntary_ctxt_switches":
			s.involuntary = n
		}
	}
	return s
}

// since is what s counts beyond an earlier reading; a count that went down (a thread ended) is
// taken as zero.
func (s switches) since(earlier switches) switches {
	return switches{voluntary: max(s.voluntary-earlier.voluntary, 0), involuntary: max(s.involuntary-earlier.involuntary, 0)}
}
