package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// SIGTERM to bench-e2e (as make passes it on) reaches the test binary under go test as SIGINT,
// and the test's interrupt cleanups run before it exits: an interrupted end-to-end benchmark
// deletes what it made.
func TestSIGTERMRunsTheTestsCleanups(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs a test binary: skipped under -short")
	}
	dir := t.TempDir()
	bench := filepath.Join(dir, "bench-e2e")
	if out, err := exec.Command("go", "build", "-o", bench, ".").CombinedOutput(); err != nil {
		t.Fatalf("build bench-e2e: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "out")
	cmd := exec.Command(bench, "-test", "TestInterrupted", "-figures", "interrupted", "-pkg", "./testdata/interrupted")
	cmd.Env = append(os.Environ(), "INTERRUPTED_OUT="+out)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.After(3 * time.Minute)
	for {
		if _, err := os.Stat(out + ".running"); err == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("bench-e2e ended before its test ran: %v", err)
		case <-deadline:
			cmd.Process.Kill()
			t.Fatal("the test did not start within 3 minutes")
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Error("bench-e2e succeeded although its test was interrupted")
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("bench-e2e did not end within a minute of SIGTERM")
	}
	if got, _ := os.ReadFile(out); string(got) != "cleaned up" {
		t.Errorf("the interrupted test's cleanup wrote %q, want %q", got, "cleaned up")
	}
}
