package hostproc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestProcStatAndAlive(t *testing.T) {
	st, ok := ReadStat(os.Getpid())
	if !ok || st.StartTime == 0 || st.State == 0 {
		t.Fatalf("ReadStat(self) = %+v, %v", st, ok)
	}
	if !Alive(os.Getpid(), st.StartTime) {
		t.Error("this process is not alive")
	}
	if Alive(os.Getpid(), st.StartTime+1) {
		t.Error("a pid with another start time counts as alive (pid reuse)")
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if Alive(cmd.Process.Pid, 0) {
		t.Error("an exited process is alive")
	}
	if Alive(0, 0) {
		t.Error("pid 0 is alive")
	}
}

func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "agent.log")
	if got := LogTail(p, 3); !strings.Contains(got, "no agent log") {
		t.Errorf("missing log: %q", got)
	}
	var b strings.Builder
	for i := range 3000 {
		b.WriteString("line ")
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteString("\n\n")
	}
	b.WriteString("the last words\n")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	got := LogTail(p, 3)
	if !strings.HasSuffix(got, "the last words") || strings.Count(got, " | ") != 2 {
		t.Errorf("LogTail = %q", got)
	}
}
