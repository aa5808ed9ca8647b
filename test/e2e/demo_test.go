package e2e

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

// Lines hack/demo.sh prints: once its fleet answers, before it waits for Ctrl-C; and when its
// cleanup starts deleting the fleet.
const (
	demoServing  = "The fleet is serving."
	demoDeleting = "==> deleting the fleet"
)

// demoLimits: the first boot of the demo builds herd and the node image too.
const (
	demoServeLimit = 15 * time.Minute
	demoStopLimit  = 3 * time.Minute
)

// demo is hack/demo.sh running in a process group of its own, as a terminal runs a foreground job.
type demo struct {
	cmd     *exec.Cmd
	mu      sync.Mutex
	out     bytes.Buffer
	serving chan struct{} // closed when the script says the fleet serves
	done    chan struct{} // closed when the script has exited
}

// startDemo starts hack/demo.sh with its output read by the test; with tee, as `hack/demo.sh 2>&1
// | tee demo.log` in the same process group, so that Ctrl-C stops tee too and the demo's output
// goes nowhere from then on.
func startDemo(t *testing.T, e *env, tee bool) *demo {
	t.Helper()
	d := &demo{serving: make(chan struct{}), done: make(chan struct{})}
	script := filepath.Join(e.root, "hack", "demo.sh")
	d.cmd = exec.Command("bash", script)
	if tee {
		d.cmd = exec.Command("bash", "-c", `bash "$0" 2>&1 | tee "$1"`, script, filepath.Join(e.dir, "demo.log"))
	}
	d.cmd.Dir = e.root
	d.cmd.Env = append(os.Environ(), "HERD_DEMO_DIR="+e.dir)
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stdout, d.cmd.Stderr = pw, pw
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	go func() {
		sc := bufio.NewScanner(pr)
		said := false
		for sc.Scan() {
			d.mu.Lock()
			d.out.WriteString(sc.Text() + "\n")
			d.mu.Unlock()
			if !said && strings.HasPrefix(sc.Text(), demoServing) {
				said = true
				close(d.serving)
			}
		}
		pr.Close()
	}()
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	return d
}

// interrupt sends SIGINT to the demo's process group: what Ctrl-C in its terminal does.
func (d *demo) interrupt(t *testing.T) {
	t.Helper()
	if err := syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatalf("SIGINT to the demo's process group: %v", err)
	}
}

// waitOutput waits until the demo has printed a line starting with prefix, or has exited, or limit
// has passed, and reports whether it printed the line.
func (d *demo) waitOutput(prefix string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	printed := func() bool {
		out := d.output()
		return strings.HasPrefix(out, prefix) || strings.Contains(out, "\n"+prefix)
	}
	for {
		if printed() {
			return true
		}
		select {
		case <-d.done:
			return printed()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (d *demo) output() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.out.String()
}

// stop is the test's last resort when the demo did not finish by itself: Ctrl-C, then SIGKILL to
// its group, then SIGINT to a `herd up` of its data directory that outlived it (whose pid the
// script does not print), so that the env's cleanup can delete what is left.
func (d *demo) stop(t *testing.T, e *env) {
	select {
	case <-d.done:
	default:
		_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGINT)
		select {
		case <-d.done:
		case <-time.After(demoStopLimit):
			t.Errorf("the demo did not exit within %s of Ctrl-C; killing its process group", demoStopLimit)
			_ = syscall.Kill(-d.cmd.Process.Pid, syscall.SIGKILL)
			<-d.done
		}
	}
	for _, pid := range herdUpOf(e.data) {
		t.Errorf("herd up (pid %d) outlived the demo; stopping it", pid)
		if p, err := os.FindProcess(pid); err == nil {
			_ = p.Signal(syscall.SIGINT)
			if _, err := p.Wait(); err != nil {
				waitGone(pid, time.Minute)
			}
		}
	}
}

// herdUpOf returns the pids of `herd up` processes with --data-dir data.
func herdUpOf(data string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, ent := range entries {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) > 3 && args[1] == "up" && strings.Contains(strings.Join(args, " "), "--data-dir "+data) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits until pid (not a child of this process) has exited, or limit passes.
func waitGone(pid int, limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && syscall.Kill(pid, 0) == nil {
		time.Sleep(100 * time.Millisecond)
	}
}

// TestIntegrationDemoInterrupt runs `make demo`'s script as a terminal does, presses Ctrl-C (SIGINT
// to its whole process group) once the fleet serves, and checks that the demo removes every
// instance and stops herd up before it exits: no herd up, network namespace, process, mount or
// cgroup of it is left. In a terminal, Ctrl-C is pressed again, impatiently, while it cleans up;
// piped through tee, Ctrl-C stops tee as well, so that the cleanup writes to a pipe nobody reads.
func TestIntegrationDemoInterrupt(t *testing.T) {
	t.Run("terminal", func(t *testing.T) { testDemoInterrupt(t, false) })
	t.Run("piped through tee", func(t *testing.T) { testDemoInterrupt(t, true) })
}

func testDemoInterrupt(t *testing.T, tee bool) {
	e := newEnv(t)
	// The demo keeps everything under HERD_DEMO_DIR: the client config where e.herd reads it, the
	// provider's state in data/ and herd up's log in up.log.
	e.data, e.upLog = filepath.Join(e.dir, "data"), filepath.Join(e.dir, "up.log")
	before := localtest.Take(t)
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	d := startDemo(t, e, tee)
	localtest.CleanupOnInterrupt(t, func() {
		d.stop(t, e)
		if t.Failed() {
			t.Logf("demo output (tail):\n%s", tail(d.output(), 40))
		}
	})

	select {
	case <-d.serving:
	case <-d.done:
		t.Fatalf("the demo exited before its fleet served:\n%s", tail(d.output(), 40))
	case <-time.After(demoServeLimit):
		t.Fatalf("the demo's fleet did not serve within %s", demoServeLimit)
	}
	ins := e.instances() // records their names for the checks below
	if len(ins) == 0 {
		t.Fatalf("the demo serves, but herd get instances lists none")
	}

	d.interrupt(t)
	switch {
	case tee: // nothing it says after Ctrl-C reaches anyone
	case d.waitOutput(demoDeleting, time.Minute):
		d.interrupt(t)
	default:
		t.Errorf("the demo did not say %q after Ctrl-C", demoDeleting)
	}
	select {
	case <-d.done:
	case <-time.After(demoStopLimit):
		t.Fatalf("the demo did not exit within %s of Ctrl-C", demoStopLimit)
	}
	if pids := herdUpOf(e.data); len(pids) > 0 {
		t.Errorf("herd up (pids %v) is still running after the demo exited", pids)
	}

	o := localtest.Owned{Dirs: []string{e.dir}}
	for n := range e.created {
		ns, veth, cg := local.HostNames(n)
		o.Netns = append(o.Netns, ns)
		o.Links = append(o.Links, veth)
		o.Cgroups = append(o.Cgroups, strings.TrimPrefix(cg, "/"))
	}
	left, err := localtest.Leftovers(o)
	if err != nil {
		t.Fatalf("check what the demo left: %v", err)
	}
	for _, l := range left {
		t.Errorf("left behind by the demo after Ctrl-C: %s", l)
	}
}
