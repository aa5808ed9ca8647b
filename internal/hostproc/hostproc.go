// Package hostproc is what the local provider and the network lab do with the host's processes:
// start one that outlives herd (an instance's agent, a link relay, a load balancer), tell it from
// a process that reused its pid by its start time, stop it, and find processes by command line
// or network namespace in /proc.
package hostproc

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// procDir is where the kernel shows its processes.
const procDir = "/proc"

// Stat is what herd reads of /proc/<pid>/stat.
type Stat struct {
	State     byte
	StartTime uint64 // clock ticks after boot
}

// ReadStat parses /proc/<pid>/stat; ok is false when the process does not exist.
func ReadStat(pid int) (Stat, bool) {
	data, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "stat"))
	if err != nil {
		return Stat{}, false
	}
	// The command name (field 2) is in parentheses and may hold spaces and ')': skip to the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return Stat{}, false
	}
	fields := strings.Fields(string(data[i+1:]))
	// fields[0] is field 3 (state); starttime is field 22, so fields[19].
	if len(fields) < 20 || len(fields[0]) != 1 {
		return Stat{}, false
	}
	st, err := strconv.ParseUint(fields[19], 10, 64)
	if err != nil {
		return Stat{}, false
	}
	return Stat{State: fields[0][0], StartTime: st}, true
}

// Alive reports whether pid is still the process that started at startTime, and not a zombie.
func Alive(pid int, startTime uint64) bool {
	if pid <= 0 {
		return false
	}
	st, ok := ReadStat(pid)
	if !ok || st.State == 'Z' || st.State == 'X' {
		return false
	}
	return startTime == 0 || st.StartTime == startTime
}

// StartDetached starts a process that outlives this one (its own session, logging to logPath),
// in the network namespace at netnsPath if not "" and with the namespaces of cloneflags new, and
// returns its pid and start time, without waiting for it.
func StartDetached(logPath, netnsPath string, cloneflags uintptr, args ...string) (int, uint64, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, 0, fmt.Errorf("open %s: %w", logPath, err)
	}
	defer logf.Close()
	if netnsPath != "" {
		nsenter, err := exec.LookPath("nsenter")
		if err != nil {
			return 0, 0, fmt.Errorf("nsenter: %w (install util-linux)", err)
		}
		args = append([]string{nsenter, "--net=" + netnsPath, "--"}, args...)
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: cloneflags}
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", strings.Join(cmd.Args, " "), err)
	}
	pid := cmd.Process.Pid
	st, ok := ReadStat(pid)
	go func() { _ = cmd.Wait() }() // reap it if it exits while this process runs
	if !ok {
		return 0, 0, fmt.Errorf("%s: pid %d vanished at once", strings.Join(cmd.Args, " "), pid)
	}
	return pid, st.StartTime, nil
}

// Stop stops a detached process: SIGTERM, then SIGKILL after timeout.
func Stop(ctx context.Context, pid int, start uint64, timeout time.Duration) error {
	if !Alive(pid, start) {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	if WaitFor(ctx, timeout, func() bool { return !Alive(pid, start) }, fmt.Sprintf("process %d to stop", pid)) == nil {
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return WaitFor(ctx, 5*time.Second, func() bool { return !Alive(pid, start) }, fmt.Sprintf("process %d to die", pid))
}

// KillStrays kills every process whose command line has the argument arg (a config or token
// path only one process may use) and waits until they are gone.
func KillStrays(ctx context.Context, arg string) error {
	for pid := range Matching(func(pid int) bool { return slices.Contains(Cmdline(pid), arg) }) {
		st, ok := ReadStat(pid)
		if !ok {
			continue
		}
		if err := Stop(ctx, pid, st.StartTime, 0); err != nil {
			return fmt.Errorf("stop process %d left by a crash: %w", pid, err)
		}
	}
	return nil
}

// Matching returns the processes, other than this one, that match says yes to.
func Matching(match func(pid int) bool) map[int]bool {
	out := map[int]bool{}
	entries, err := os.ReadDir(procDir)
	if err != nil {
		return out
	}
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if match(pid) {
			out[pid] = true
		}
	}
	return out
}

// Cmdline returns the arguments of pid's command line, nil when it cannot be read.
func Cmdline(pid int) []string {
	data, err := os.ReadFile(filepath.Join(procDir, strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
}

// InNetns reports whether pid runs in the network namespace of inode ino.
func InNetns(pid int, ino uint64) bool {
	l, err := os.Readlink(filepath.Join(procDir, strconv.Itoa(pid), "ns", "net"))
	return err == nil && l == fmt.Sprintf("net:[%d]", ino)
}

// KillAll SIGKILLs the processes find returns until it returns none that is alive; what names
// them in the error.
func KillAll(ctx context.Context, timeout time.Duration, what string, find func() map[int]bool) error {
	var left map[int]bool
	err := WaitFor(ctx, timeout, func() bool {
		left = find()
		for pid := range left {
			if st, ok := ReadStat(pid); ok && st.State != 'Z' {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			} else {
				delete(left, pid)
			}
		}
		return len(left) == 0
	}, what+" to exit")
	if err != nil {
		return fmt.Errorf("kill processes %v: %w", slices.Sorted(maps.Keys(left)), err)
	}
	return nil
}

// WaitFor polls cond until it holds or timeout passes.
func WaitFor(ctx context.Context, timeout time.Duration, cond func() bool, what string) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
	}
	return nil
}

// LogTail returns the last n non-empty lines of a log file, for a failure reason.
func LogTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "no agent log (" + path + ")"
	}
	defer f.Close()
	const window = 8 << 10
	if fi, err := f.Stat(); err == nil && fi.Size() > window {
		_, _ = f.Seek(fi.Size()-window, io.SeekStart)
	}
	data, _ := io.ReadAll(f)
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) == 0 {
		return path + " is empty"
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "last lines of " + path + ": " + strings.Join(lines, " | ")
}
