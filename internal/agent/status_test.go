package agent

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestStatusWriter(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, StatusFile)
	start := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	clock := start
	s := newStatusWriter(path, start)
	s.now = func() time.Time { return clock }

	clock = start.Add(1234567 * time.Microsecond)
	if err := s.step("containerd ready"); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseBooting || len(st.Steps) != 1 || st.Steps[0].Name != "containerd ready" || st.Steps[0].Seconds != 1.235 {
		t.Errorf("after a step: %+v", st)
	}
	if !st.UpdatedAt.Equal(clock) {
		t.Errorf("updatedAt = %v, want %v", st.UpdatedAt, clock)
	}
	if !st.StartedAt.Equal(start) {
		t.Errorf("startedAt = %v, want the agent's start %v", st.StartedAt, start)
	}

	clock = start.Add(6 * time.Second)
	if err := s.set(PhaseReady, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.set(PhaseStopping, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	if err := s.set(PhaseStopped, ""); err != nil {
		t.Fatal(err)
	}
	if err := s.set(PhaseFailed, "late failure"); err != nil {
		t.Fatal(err)
	}
	st, err = ReadStatus(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseStopped || st.Reason != "" {
		t.Errorf("a final phase changed: %+v", st)
	}

	// The file is exactly the contract's shape.
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"phase", "reason", "updatedAt", "startedAt", "steps"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("status.json lacks %q: %s", k, data)
		}
	}
	if _, err := time.Parse(time.RFC3339, raw["updatedAt"].(string)); err != nil {
		t.Errorf("updatedAt is not RFC3339: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestStatusFailedIsFinal(t *testing.T) {
	path := filepath.Join(t.TempDir(), StatusFile)
	s := newStatusWriter(path, time.Now())
	if err := s.set(PhaseFailed, "kube-apiserver exited"); err != nil {
		t.Fatal(err)
	}
	if err := s.set(PhaseStopping, "SIGTERM"); err != nil {
		t.Fatal(err)
	}
	st, err := ReadStatus(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Phase != PhaseFailed || st.Reason != "kube-apiserver exited" {
		t.Errorf("status = %+v", st)
	}
	if s.st.Phase != PhaseFailed {
		t.Errorf("in memory: %+v", s.st)
	}
}
