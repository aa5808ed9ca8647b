package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/agent/cgroups"
)

// A flood is a tenant's load from clients that, in production, run on machines of their own:
// here, unpaced keep-alive clients in a process of their own (this test binary run again), in a
// cgroup whose CPU time is capped, so that the flood's clients compete with herd's load balancer
// and instances for no more than that share of the machine, as remote clients would not at all.

// floodEnv tells the test binary to be a flood: "URL TENANT CLIENTS". It floods until its
// standard input closes, then prints its counts.
const floodEnv = "HERD_E2E_FLOOD"

// tenantClient is an HTTP client whose every request names tenant in X-Tenant.
func tenantClient(tenant string, timeout time.Duration) *http.Client {
	base := &http.Transport{MaxIdleConnsPerHost: 1}
	return &http.Client{Timeout: timeout, Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r = r.Clone(r.Context())
		r.Header.Set("X-Tenant", tenant)
		return base.RoundTrip(r)
	})}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// runFlood is the flood process's whole work when floodEnv is set; it reports whether it was.
func runFlood() bool {
	spec := os.Getenv(floodEnv)
	if spec == "" {
		return false
	}
	var url, tenant string
	var n int
	if _, err := fmt.Sscan(spec, &url, &tenant, &n); err != nil {
		fmt.Fprintf(os.Stderr, "%s=%q: %v\n", floodEnv, spec, err)
		os.Exit(2)
	}
	start := time.Now()
	l := startLoadWith(func() *http.Client { return tenantClient(tenant, 5*time.Second) }, url, n, 0, time.Hour)
	_, _ = io.Copy(io.Discard, os.Stdin)
	rs := l.finish()
	failed := 0
	for _, r := range rs {
		if r.err != nil {
			failed++
		}
	}
	fmt.Printf("flood: requests=%d failed=%d seconds=%.3f\n", len(rs), failed, time.Since(start).Seconds())
	return true
}

// floods counts the floods started, which name their cgroups.
var floods atomic.Int64

// flood is a running flood process.
type flood struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *strings.Builder
}

// startFlood starts n unpaced clients of tenant against url in a process of their own, capped
// to cpus CPUs of this machine by a cgroup made for it and removed when the test ends.
func startFlood(t *testing.T, url, tenant string, n int, cpus float64) *flood {
	t.Helper()
	procs := cpuCappedCgroup(t, fmt.Sprintf("herd-e2e-flood-%d-%d", os.Getpid(), floods.Add(1)), cpus)
	// The shell enters the cgroup, then becomes the flood: no flood request runs outside it.
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, procs, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", floodEnv, url, tenant, n))
	f := &flood{cmd: cmd, out: &strings.Builder{}}
	cmd.Stdout, cmd.Stderr = f.out, f.out
	var err error
	if f.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the flood: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return f
}

// stop ends the flood and returns how many requests it sent, how many failed, and over how long.
func (f *flood) stop(t *testing.T) (requests, failed int, took time.Duration) {
	t.Helper()
	f.stdin.Close()
	if err := f.cmd.Wait(); err != nil {
		t.Fatalf("the flood process: %v: %s", err, f.out)
	}
	sc := bufio.NewScanner(strings.NewReader(f.out.String()))
	for sc.Scan() {
		var secs float64
		if _, err := fmt.Sscanf(sc.Text(), "flood: requests=%d failed=%d seconds=%g", &requests, &failed, &secs); err == nil {
			return requests, failed, time.Duration(secs * float64(time.Second))
		}
	}
	t.Fatalf("the flood printed no counts: %s", f.out)
	return 0, 0, 0
}

// cpuCappedCgroup makes cgroup /name whose processes may use cpus CPUs at most (cgroup v1's
// cpu.cfs_quota_us, or v2's cpu.max), removed when the test ends, and returns its cgroup.procs.
func cpuCappedCgroup(t *testing.T, name string, cpus float64) string {
	t.Helper()
	hs, err := cgroups.Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	const period = 100000 // µs
	quota := strconv.Itoa(int(cpus * period))
	for _, h := range hs {
		var files map[string]string
		switch {
		case h.Has("cpu"):
			files = map[string]string{"cpu.cfs_period_us": strconv.Itoa(period), "cpu.cfs_quota_us": quota}
		case h.V2 && len(hs) == 1:
			_ = os.WriteFile(filepath.Join(h.Mount, "cgroup.subtree_control"), []byte("+cpu"), 0o644)
			files = map[string]string{"cpu.max": quota + " " + strconv.Itoa(period)}
		default:
			continue
		}
		dir := h.Path("/" + name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatalf("a cgroup for the flood: %v", err)
		}
		t.Cleanup(func() {
			// The flood has exited (its own cleanup ran first); a cgroup's last process may take a
			// moment to leave it.
			err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
				err := syscall.Rmdir(dir)
				return err != syscall.EBUSY, nil
			})
			if err != nil {
				t.Errorf("removing the flood's cgroup %s: %v", dir, err)
			}
		})
		for _, f := range []string{"cpu.cfs_period_us", "cpu.cfs_quota_us", "cpu.max"} {
			if v, ok := files[f]; ok {
				if err := os.WriteFile(filepath.Join(dir, f), []byte(v), 0o644); err != nil {
					t.Fatalf("capping the flood's cgroup: %v", err)
				}
			}
		}
		t.Logf("the flood's clients run in cgroup %s, capped to %.2f CPU; it is removed when the test ends", dir, cpus)
		return filepath.Join(dir, "cgroup.procs")
	}
	t.Fatal("no cgroup hierarchy with the cpu controller: the flood's clients cannot be capped")
	return ""
}
