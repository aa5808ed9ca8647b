package agent

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"herd.dev/herd/internal/agent/cgroups"
)

// What the integration tests read of an instance's processes, by its cgroup root.

// procs lists the processes in the cgroup root's subtree (none when the hierarchies cannot be
// read).
func procs(root string) []int {
	hs, err := cgroups.Hierarchies()
	if err != nil {
		return nil
	}
	return cgroups.Procs(hs, root)
}

// rssSumMB sums the resident memory of every process in the cgroup root's subtree.
func rssSumMB(root string) (float64, int) {
	var kb, n int
	for _, pid := range procs(root) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			var v int
			if _, err := fmt.Sscanf(sc.Text(), "VmRSS: %d kB", &v); err == nil {
				kb += v
				n++
			}
		}
		f.Close()
	}
	return float64(kb) / 1024, n
}

// procNamed returns the PID of a process named comm in the cgroups under root, or 0.
func procNamed(root, comm string) int {
	for _, pid := range procs(root) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == comm {
			return pid
		}
	}
	return 0
}
