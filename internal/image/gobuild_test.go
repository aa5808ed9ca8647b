// Tests of the pause program the go tool builds into every bundle.

package image

import (
	"context"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPauseExitsZeroOnSIGTERM(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go toolchain not on PATH")
	}
	bin, err := buildPauseBinary(context.Background(), goTool, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	// A Go program dies of a SIGTERM that arrives before it calls signal.Notify. Started with
	// SIGINT ignored, the program installs a SIGINT handler only in signal.Notify, which also
	// subscribes SIGTERM first: a caught SIGINT in /proc says the program is ready.
	signal.Ignore(syscall.SIGINT)
	defer signal.Reset(syscall.SIGINT)
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			cmd := exec.Command(bin)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			waitCatches(t, cmd.Process.Pid, syscall.SIGINT)
			if err := cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("pause exited with %v after %v, want status 0", err, sig)
			}
		})
	}
}

// waitCatches waits until process pid has a handler for sig (its SigCgt mask in /proc).
func waitCatches(t *testing.T, pid int, sig syscall.Signal) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if mask, ok := strings.CutPrefix(line, "SigCgt:"); ok {
				m, err := strconv.ParseUint(strings.TrimSpace(mask), 16, 64)
				if err == nil && m&(1<<(uint(sig)-1)) != 0 {
					return
				}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("process %d never caught %v", pid, sig)
}
