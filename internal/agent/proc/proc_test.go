package proc

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLastLines(t *testing.T) {
	tests := []struct {
		name string
		data string
		n    int
		cut  bool
		want string
	}{
		{"empty", "", 3, false, ""},
		{"fewer than n", "a\nb\n", 3, false, "a\nb"},
		{"exactly n", "a\nb\nc", 3, false, "a\nb\nc"},
		{"more than n", "a\nb\nc\nd\n", 2, false, "c\nd"},
		{"cut drops partial first line", "tial\nb\nc\n", 5, true, "b\nc"},
		{"cut keeps a lone line", "only\n", 5, true, "only"},
		{"trailing blank lines", "a\n\n\n", 2, false, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := lastLines([]byte(tt.data), tt.n, tt.cut); got != tt.want {
				t.Errorf("lastLines(%q, %d, %v) = %q, want %q", tt.data, tt.n, tt.cut, got, tt.want)
			}
		})
	}
}

func TestShorten(t *testing.T) {
	if got := shorten("short\n"+strings.Repeat("x", 10), 5); got != "short\nxxxxx [...]" {
		t.Errorf("shorten = %q", got)
	}
}

func TestTailLargeFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.log")
	var b strings.Builder
	for i := 0; i < 5000; i++ {
		b.WriteString("line of some length to fill the file up\n")
	}
	b.WriteString("second to last\nlast\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := Tail(path, 2); got != "second to last\nlast" {
		t.Errorf("Tail = %q", got)
	}
	if got := Tail(filepath.Join(t.TempDir(), "missing"), 2); got != "" {
		t.Errorf("Tail of a missing file = %q, want empty", got)
	}
}

func waitDone(t *testing.T, p *Process) {
	t.Helper()
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not exit", p.Name())
	}
}

func TestUnexpectedExitNamesProcessAndLog(t *testing.T) {
	dir := t.TempDir()
	p, err := Start(Spec{Name: "crasher", Path: "/bin/sh", Args: []string{"-c", "echo starting; echo 'fatal: no config' >&2; exit 3"}, LogDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	waitDone(t, p)
	ee, ok := p.Unexpected()
	if !ok {
		t.Fatal("Unexpected() = false after the process exited on its own")
	}
	msg := ee.Error()
	for _, want := range []string{"crasher", "exit status 3", "fatal: no config", "starting"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	fi, err := os.Stat(p.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("log mode = %v, want 0600", fi.Mode().Perm())
	}
}

func TestStopIsExpected(t *testing.T) {
	p, err := Start(Spec{Name: "sleeper", Path: "/bin/sleep", Args: []string{"60"}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Unexpected(); ok {
		t.Fatal("Unexpected() = true for a running process")
	}
	p.Stop(5 * time.Second)
	waitDone(t, p)
	if ee, ok := p.Unexpected(); ok {
		t.Fatalf("Unexpected() after Stop = %v", ee)
	}
	p.Stop(time.Second) // twice is fine
}

func TestStopKillsAfterGrace(t *testing.T) {
	p, err := Start(Spec{Name: "stubborn", Path: "/bin/sh", Args: []string{"-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"}, LogDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for Tail(p.LogPath(), 1) != "ready" {
		if time.Now().After(deadline) {
			t.Fatal("the shell never became ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	p.Stop(200 * time.Millisecond)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
	}
}

func TestStartMissingBinary(t *testing.T) {
	_, err := Start(Spec{Name: "ghost", Path: "/nonexistent/ghost", LogDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "ghost") {
		t.Fatalf("err = %v, want an error naming ghost", err)
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		t.Fatal("a start failure is not an exit")
	}
}
