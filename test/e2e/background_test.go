package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"herd.dev/herd/internal/provider/local/localtest"
)

// bgHerd is a herd command running in the background, its standard output read line by line.
type bgHerd struct {
	e     *env
	name  string
	cmd   *exec.Cmd
	lines chan string // closed at the end of the output; lines nobody reads in time are dropped

	mu     sync.Mutex
	stderr strings.Builder

	exited chan struct{} // closed once the command has ended, err then set
	err    error
}

// Write collects the command's standard error.
func (b *bgHerd) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stderr.Write(p)
}

func (b *bgHerd) stderrText() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.stderr.String()
}

// startHerd runs herd with args in the background; the test's cleanup interrupts it if it still runs.
func (e *env) startHerd(args ...string) *bgHerd {
	e.t.Helper()
	return e.startHerdEnv(nil, args...)
}

// startHerdEnv is startHerd with more environment variables.
func (e *env) startHerdEnv(env []string, args ...string) *bgHerd {
	e.t.Helper()
	b := &bgHerd{e: e, name: "herd " + strings.Join(args, " "), lines: make(chan string, 4096), exited: make(chan struct{})}
	b.cmd = exec.Command(e.bin, args...)
	b.cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(e.dir, "config"))
	b.cmd.Env = append(b.cmd.Env, env...)
	b.cmd.Stderr = b
	stdout, err := b.cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := b.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case b.lines <- sc.Text():
			default:
			}
		}
		close(b.lines)
		b.err = b.cmd.Wait()
		close(b.exited)
	}()
	localtest.CleanupOnInterrupt(e.t, func() { _ = b.stop() })
	return b
}

// waitLine returns the first line that match accepts, failing the test if none comes within
// timeout or the command ends first.
func (b *bgHerd) waitLine(timeout time.Duration, what string, match func(string) bool) string {
	t := b.e.t
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case l, ok := <-b.lines:
			if !ok {
				<-b.exited
				t.Fatalf("%s ended (%v) before printing %s; stderr: %s", b.name, b.err, what, b.stderrText())
			}
			if match(l) {
				return l
			}
		case <-timer.C:
			_ = b.stop()
			t.Fatalf("%s printed no %s in %s; stderr: %s", b.name, what, timeout, b.stderrText())
		}
	}
}

// stop interrupts the command as Ctrl-C would (herd kubectl then ends its kubectl and removes its
// kubeconfig), kills it if it still runs 30 s later, and returns how it ended.
func (b *bgHerd) stop() error {
	select {
	case <-b.exited:
		return b.err
	default:
	}
	_ = b.cmd.Process.Signal(os.Interrupt)
	select {
	case <-b.exited:
	case <-time.After(30 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.exited
	}
	return b.err
}
