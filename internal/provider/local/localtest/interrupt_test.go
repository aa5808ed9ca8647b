package localtest

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// interruptChildEnv makes TestCleanupOnInterrupt the interrupted test binary: it names the file
// the child's cleanups write to.
const interruptChildEnv = "LOCALTEST_INTERRUPT_CHILD"

// A test binary that gets SIGTERM (or SIGINT) mid-test runs its tests' interrupt cleanups, the
// latest registered first, each once, and exits 1; without them it would die at once.
func TestCleanupOnInterrupt(t *testing.T) {
	if out := os.Getenv(interruptChildEnv); out != "" {
		write := func(line string) func() {
			return func() {
				f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
				if err == nil {
					f.WriteString(line + "\n")
					f.Close()
				}
			}
		}
		CleanupOnInterrupt(t, write("first"))
		CleanupOnInterrupt(t, write("second"))
		os.Stdout.WriteString("registered\n")
		time.Sleep(10 * time.Minute) // until the signal
		return
	}

	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		out := filepath.Join(t.TempDir(), "cleanups")
		child := exec.Command(os.Args[0], "-test.run=^TestCleanupOnInterrupt$", "-test.v")
		child.Env = append(os.Environ(), interruptChildEnv+"="+out)
		stdout, err := child.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		for sc.Scan() && sc.Text() != "registered" {
		}
		if err := child.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			for sc.Scan() {
			}
			done <- child.Wait()
		}()
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			child.Process.Kill()
			t.Fatalf("%v: the test binary did not exit within a minute", sig)
		}
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%v: the test binary ended with %v, want exit status 1", sig, err)
		}
		got, _ := os.ReadFile(out)
		if string(got) != "second\nfirst\n" {
			t.Errorf("%v: the cleanups wrote %q, want %q (each once, the latest first)", sig, got, "second\nfirst\n")
		}
	}
}
