package agent

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"herd.dev/herd/internal/agent/pki"
)

// StatusFile is the name of the status file in the agent's state dir.
const StatusFile = "status.json"

// Phase is where an instance's agent is in its life.
type Phase string

// The phases, in the order an instance goes through them. Failed and Stopped are final.
const (
	PhaseBooting  Phase = "Booting"  // booting the cluster, importing images, applying manifests, waiting for workloads
	PhaseReady    Phase = "Ready"    // the node is Ready and every baked workload is available
	PhaseFailed   Phase = "Failed"   // the boot failed or a component exited; Reason says why
	PhaseStopping Phase = "Stopping" // SIGTERM received: stopping the workload, then the cluster
	PhaseStopped  Phase = "Stopped"  // everything stopped; the agent has exited or is about to
)

// Status is the content of <state-dir>/status.json, written atomically on every change.
type Status struct {
	Phase Phase `json:"phase"`
	// Reason says why the phase is what it is: for Failed, what failed and the evidence (the
	// object and the API server's message, the workload's conditions and its pods' container
	// states, or the component and the last lines of its log).
	Reason string `json:"reason"`
	// UpdatedAt is when the status last changed.
	UpdatedAt time.Time `json:"updatedAt"`
	// StartedAt is when the agent started: what the steps' seconds count from, and what puts
	// them on a timeline beside the instance's creation (make bench-instance).
	StartedAt time.Time `json:"startedAt"`
	// Steps are the boot steps reached, in order, with the seconds since the agent started.
	Steps []Step `json:"steps"`
}

// Step is one boot step reached.
type Step struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
}

// ReadStatus reads a status file (<state-dir>/status.json).
func ReadStatus(path string) (Status, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Status{}, err
	}
	var st Status
	if err := json.Unmarshal(data, &st); err != nil {
		return Status{}, fmt.Errorf("%s: %w", path, err)
	}
	return st, nil
}

// statusWriter keeps the status and writes it to its file on every change.
type statusWriter struct {
	path  string
	start time.Time
	now   func() time.Time

	mu sync.Mutex
	st Status
}

func newStatusWriter(path string, start time.Time) *statusWriter {
	return &statusWriter{path: path, start: start, now: time.Now, st: Status{Phase: PhaseBooting, StartedAt: start.UTC(), Steps: []Step{}}}
}

// step records a boot step and writes the file.
func (s *statusWriter) step(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	secs := math.Round(now.Sub(s.start).Seconds()*1000) / 1000
	s.st.Steps = append(s.st.Steps, Step{Name: name, Seconds: secs})
	s.st.UpdatedAt = now.UTC()
	return s.writeLocked()
}

// set changes the phase and reason and writes the file. A final phase (Failed, Stopped) is
// kept: later calls change nothing, except that Stopped follows Stopping.
func (s *statusWriter) set(p Phase, reason string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.Phase == PhaseFailed || s.st.Phase == PhaseStopped {
		return nil
	}
	s.st.Phase, s.st.Reason = p, reason
	s.st.UpdatedAt = s.now().UTC()
	return s.writeLocked()
}

// writeLocked writes the file atomically (a reader never sees half of it).
func (s *statusWriter) writeLocked() error {
	data, err := json.MarshalIndent(s.st, "", "  ")
	if err != nil {
		return err
	}
	if err := pki.WriteFile(s.path, append(data, '\n'), 0o644); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	return nil
}
