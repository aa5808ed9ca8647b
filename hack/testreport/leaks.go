package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"
)

// The leak check: a run of the tests must leave no instance, network namespace, mount or process
// behind. testreport makes itself the child subreaper of everything go test starts, so that a
// process whose parent died (herd up of a test binary that was killed, an instance's agent whose
// herd up was SIGKILLed) is reparented to testreport rather than to init: when go test has
// exited, every process still under testreport was left by the run, whoever started it. Network
// namespaces and mounts have no parent to tell whose they are; those that appeared during the run
// and are still there at its end are the run's.

// leftoverGrace is how long processes that are on their way out (an instance torn down a moment
// before its test returned) get to go before they count as left behind.
const leftoverGrace = 15 * time.Second

// hostState is what the leak check compares before and after the run.
type hostState struct {
	netns  map[string]bool // names under /run/netns
	mounts map[string]bool // mount points of testreport's mount namespace
}

func snapshotHost() hostState {
	return hostState{netns: netnsNames(), mounts: mountPoints()}
}

func netnsNames() map[string]bool {
	names := map[string]bool{}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names
}

func mountPoints() map[string]bool {
	points := map[string]bool{}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return points
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo: id parent major:minor root mount-point ...
		if fields := strings.Fields(sc.Text()); len(fields) > 4 {
			points[fields[4]] = true
		}
	}
	return points
}

// becomeSubreaper makes orphaned descendants this process's children (see the leak check above).
func becomeSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// proc is one process as /proc/PID/stat tells it.
type proc struct {
	pid, ppid int
	state     byte
	comm      string
}

func processes() []proc {
	var all []proc
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses, so split at the last ')'.
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < open {
			continue
		}
		rest := strings.Fields(s[close+1:])
		if len(rest) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(rest[1])
		all = append(all, proc{pid: pid, ppid: ppid, state: rest[0][0], comm: s[open+1 : close]})
	}
	return all
}

// descendants returns the live processes under pid, and reaps those of its children that are
// zombies (orphans that ended after they were reparented here), except keep, whose exit status
// belongs to exec.Cmd.
func descendants(pid, keep int) []proc {
	all := processes()
	under := map[int]bool{pid: true}
	// Parents may come after their children in /proc's order: iterate to a fixed point.
	for changed := true; changed; {
		changed = false
		for _, p := range all {
			if under[p.ppid] && !under[p.pid] {
				under[p.pid], changed = true, true
			}
		}
	}
	var live []proc
	for _, p := range all {
		if p.pid == pid || !under[p.pid] {
			continue
		}
		if p.state == 'Z' {
			if p.ppid == pid && p.pid != keep {
				var ws unix.WaitStatus
				unix.Wait4(p.pid, &ws, unix.WNOHANG, nil)
			}
			continue
		}
		live = append(live, p)
	}
	return live
}

// reapOrphans reaps this process's zombie children but keep until ctx ends, so that orphans that
// end during a long run do not pile up as zombies.
func reapOrphans(ctx context.Context, keep int) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			descendants(os.Getpid(), keep)
		}
	}
}

// leftovers waits up to grace for the processes still under this one to end, then kills those
// that did not, and returns what the run left: those processes, and, with host, the network
// namespaces and mounts that appeared since before and are still there.
func leftovers(before hostState, host bool, grace time.Duration) []string {
	self := os.Getpid()
	var left []proc
	wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, grace, true, func(context.Context) (bool, error) {
		left = descendants(self, 0)
		return len(left) == 0, nil
	})
	var found []string
	for _, p := range left {
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.pid))
		args := strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " "))
		found = append(found, fmt.Sprintf("process %d %s (%s): killed", p.pid, p.comm, args))
		unix.Kill(p.pid, unix.SIGKILL)
	}
	if len(left) > 0 {
		// Reap what was killed, so that testreport leaves no zombie either.
		wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return len(descendants(self, 0)) == 0, nil
		})
	}
	if !host {
		return found
	}
	after := snapshotHost()
	for _, name := range sortedNew(before.netns, after.netns) {
		found = append(found, "network namespace "+name)
	}
	for _, point := range sortedNew(before.mounts, after.mounts) {
		// /run/netns is made a shared mount point once and for good (as ip netns does); the namespaces'
		// own mounts under it are reported as namespaces above.
		if point != "/run/netns" && !strings.HasPrefix(point, "/run/netns/") {
			found = append(found, "mount "+point)
		}
	}
	return found
}

func sortedNew(before, after map[string]bool) []string {
	var added []string
	for k := range after {
		if !before[k] {
			added = append(added, k)
		}
	}
	slices.Sort(added)
	return added
}
