package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

// TestIntegrationBenchInstanceNoOrphanOnSIGTERM runs make bench-instance and sends make SIGTERM
// halfway, while the benchmark's instance idles: make passes it on to the benchmark, which deletes
// the instance (processes, namespaces, mounts, cgroups, links) and its data directory before it
// exits, leaving no orphan behind. (Under go run, which dies on SIGTERM without passing it on, the
// benchmark ran on with its instance.) The benchmark takes the real-instance lock itself.
func TestIntegrationBenchInstanceNoOrphanOnSIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("real instances: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("real instances need root (network namespaces, bridges, cgroups)")
	}
	dir := t.TempDir()
	root := localtest.BuildHerd(t, dir)
	herd := filepath.Join(dir, "herd")
	if err := local.CheckHost(herd); err != nil {
		t.Skipf("real instances cannot run here (run make deps and make kubernetes): %v", err)
	}

	// The binaries go to the test's directory (BIN), not the module's bin/.
	bench := exec.Command("make", "--no-print-directory", "bench-instance", "BIN="+dir, "BENCH_INSTANCE_FLAGS=-runs 1 -idle 10m")
	bench.Dir = root
	stdout, err := bench.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	bench.Stderr = bench.Stdout
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		exited <- bench.Wait()
	}()
	t.Cleanup(func() { _ = bench.Process.Kill() })

	// What it builds into, which instance it runs: from its output, until its instance idles.
	var dataDir, name string
	var seen []string
	deadline := time.After(20 * time.Minute) // the lock may be held by other real-instance tests
wait:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the benchmark exited before its instance idled:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if _, d, ok := strings.Cut(l, " into "); ok && strings.HasPrefix(l, "building ") {
				dataDir = d
			}
			if f := strings.Fields(l); len(f) > 3 && f[0] == "run" && f[3] == "at" {
				name = f[2]
			}
			if strings.HasPrefix(l, "idling ") {
				break wait
			}
		case <-deadline:
			t.Fatalf("the benchmark's instance did not idle in time:\n%s", strings.Join(seen, "\n"))
		}
	}
	if dataDir == "" || name == "" {
		t.Fatalf("no data directory or instance name in the benchmark's output:\n%s", strings.Join(seen, "\n"))
	}
	ns, veth, cgroup := local.HostNames(name)
	if pids, err := localtest.CgroupPIDs(cgroup); err != nil || len(pids) == 0 {
		t.Fatalf("the instance runs no process: %v %v", pids, err)
	}

	if err := bench.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range lines { // drained, so that the benchmark's writes never block
		}
	}()
	select {
	case err := <-exited:
		t.Logf("make exited on SIGTERM: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("make did not exit within 2 minutes of SIGTERM")
	}
	// The benchmark names its instances bench-<its pid>-<run>.
	pid, err := strconv.Atoi(strings.Split(name, "-")[1])
	if err != nil {
		t.Fatalf("instance %s: %v", name, err)
	}
	for end := time.Now().Add(2 * time.Minute); syscall.Kill(pid, 0) == nil; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("the benchmark (pid %d) still runs 2 minutes after make got SIGTERM", pid)
		}
	}
	left, err := localtest.Leftovers(localtest.Owned{
		Dirs: []string{dataDir}, Gone: []string{dataDir},
		Netns: []string{ns}, Links: []string{veth}, Cgroups: []string{strings.TrimPrefix(cgroup, "/")},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("left behind by the interrupted benchmark:\n%s", strings.Join(left, "\n"))
	}
}
