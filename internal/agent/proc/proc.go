// Package proc starts and supervises the long-running processes of an instance (containerd, etcd,
// the Kubernetes components): each writes its output to its own log file, and its exit is
// reported with its name and the last lines of that log, so that a component that dies can fail
// the instance with a reason a person can act on.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec describes one process to start.
type Spec struct {
	// Name names the process in logs and errors (e.g. "kube-apiserver"); its log file is
	// <LogDir>/<Name>.log.
	Name string
	// Path is the executable.
	Path string
	// Args are the arguments, without the program name.
	Args []string
	// Env is added to the agent's own environment ("KEY=value"). Default: none.
	Env []string
	// LogDir is where the log file is created (mode 0600, appended to).
	LogDir string
}

// Process is one started process.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	done    chan struct{}

	mu       sync.Mutex
	stopping bool
	err      error // the exit status, set before done is closed
}

// ExitError is the error of a process that exited on its own (not because Stop asked it to).
type ExitError struct {
	// Name is the process's name.
	Name string
	// Err is its exit status (nil for a 0 exit).
	Err error
	// LogTail is the end of its log file.
	LogTail string
}

func (e *ExitError) Error() string {
	status := "exited with status 0"
	if e.Err != nil {
		status = e.Err.Error()
	}
	if e.LogTail == "" {
		return fmt.Sprintf("%s %s (its log is empty)", e.Name, status)
	}
	return fmt.Sprintf("%s %s; last lines of its log:\n%s", e.Name, status, e.LogTail)
}

// Start starts the process described by s. It runs in its own process group, so that a signal to
// the agent's group does not reach it directly: the agent decides the order of stopping.
func Start(s Spec) (*Process, error) {
	if err := os.MkdirAll(s.LogDir, 0o700); err != nil {
		return nil, fmt.Errorf("%s: log directory: %w", s.Name, err)
	}
	logPath := filepath.Join(s.LogDir, s.Name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", s.Name, err)
	}
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("starting %s (%s): %w", s.Name, s.Path, err)
	}
	p := &Process{name: s.Name, logPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// Name returns the process's name.
func (p *Process) Name() string { return p.name }

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath returns the process's log file.
func (p *Process) LogPath() string { return p.logPath }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Unexpected reports whether the process has exited without Stop having been called, and if so
// returns an *ExitError naming it, with the tail of its log.
func (p *Process) Unexpected() (*ExitError, bool) {
	select {
	case <-p.done:
	default:
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopping {
		return nil, false
	}
	return &ExitError{Name: p.name, Err: p.err, LogTail: shorten(Tail(p.logPath, 10), 300)}, true
}

// Stop sends SIGTERM, waits up to grace for the process to exit, then sends SIGKILL and waits
// for it. It is safe to call more than once and after the process has exited.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	p.stopping = true
	p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return
	case <-t.C:
	}
	_ = p.cmd.Process.Kill()
	<-p.done
}

// Tail returns the last n lines of the file at path (reading at most its last 16 KiB), without
// a final newline; "" when the file is missing or empty.
func Tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 16 << 10
	fi, err := f.Stat()
	if err != nil {
		return ""
	}
	off := fi.Size() - max
	if off < 0 {
		off = 0
	}
	data, err := io.ReadAll(io.NewSectionReader(f, off, fi.Size()-off))
	if err != nil && !errors.Is(err, io.EOF) {
		return ""
	}
	return lastLines(data, n, off > 0)
}

// lastLines returns the last n lines of data. When cut is true the first line may be partial
// and is dropped unless it is the only one.
func lastLines(data []byte, n int, cut bool) string {
	data = bytes.TrimRight(data, "\n")
	if len(data) == 0 || n <= 0 {
		return ""
	}
	lines := strings.Split(string(data), "\n")
	if cut && len(lines) > 1 {
		lines = lines[1:]
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// shorten cuts every line of s longer than max bytes, marking the cut.
func shorten(s string, max int) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if len(l) > max {
			lines[i] = l[:max] + " [...]"
		}
	}
	return strings.Join(lines, "\n")
}
