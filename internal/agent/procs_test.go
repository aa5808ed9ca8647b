package agent

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"herd.dev/herd/internal/agent/cgroups"
)

// What the integration tests read of an instance's processes, by its cgroup root.

// rssSumMB sums the resident memory of every process in the cgroup root's subtree.
func rssSumMB(root string) (float64, int) {
	hs, err := cgroups.Hierarchies()
	if err != nil {
		return 0, 0
	}
	var kb, n int
	for _, pid := range cgroups.Procs(hs, root) {
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
	hs, err := cgroups.Hierarchies()
	if err != nil {
		return 0
	}
	for _, pid := range cgroups.Procs(hs, root) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil && strings.TrimSpace(string(b)) == comm {
			return pid
		}
	}
	return 0
}
