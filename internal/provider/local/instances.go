// What the provider reports of its instances: Get and List read the records on disk, and view
// combines a record with its agent's status.json and liveness.

package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/statefile"
)

// Get implements provider.Provider.
func (p *Provider) Get(ctx context.Context, name string) (provider.Instance, error) {
	if !provider.ValidName(name) {
		return provider.Instance{}, fmt.Errorf("local: %s: %w", name, provider.ErrNotFound)
	}
	dir := p.InstanceDir(name)
	rec, err := readRecord(dir)
	if err != nil {
		return provider.Instance{}, fmt.Errorf("local: %w", err)
	}
	if rec == nil {
		return provider.Instance{}, fmt.Errorf("local: %s: %w", name, provider.ErrNotFound)
	}
	return p.view(dir, rec), nil
}

// List implements provider.Provider: it reads the instance directories, so it finds every
// instance of the data directory, also those created by an earlier herd up.
func (p *Provider) List(ctx context.Context, opts provider.ListOptions) ([]provider.Instance, error) {
	records, err := p.records()
	if err != nil {
		return nil, fmt.Errorf("local: %w", err)
	}
	out := make([]provider.Instance, 0, len(records))
	for _, r := range records {
		if opts.Matches(r.Spec.Labels) {
			out = append(out, p.view(p.InstanceDir(r.Spec.Name), r))
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// records reads every instance record. Directories without one (a Create that died before
// writing it, which made nothing else) are skipped.
func (p *Provider) records() ([]*record, error) {
	entries, err := os.ReadDir(p.instancesDir())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*record
	for _, e := range entries {
		if !e.IsDir() || !provider.ValidName(e.Name()) {
			continue
		}
		r, err := readRecord(filepath.Join(p.instancesDir(), e.Name()))
		if err != nil {
			return nil, err
		}
		if r != nil {
			out = append(out, r)
		}
	}
	return out, nil
}

// agentStatus is what the provider reads of the agent's <state dir>/status.json (see
// docs/local-instance.md for the whole file).
type agentStatus struct {
	Phase  string `json:"phase"`
	Reason string `json:"reason"`
}

// Agent phases (status.json).
const (
	agentBooting  = "Booting"
	agentReady    = "Ready"
	agentFailed   = "Failed"
	agentStopping = "Stopping"
	agentStopped  = "Stopped"
)

// readStatus returns the status of the agent of the instance in dir; its Phase is "" while the
// agent has written none yet (or one that does not parse), which view reports as Booting.
func readStatus(dir string) agentStatus {
	var st agentStatus
	if data, err := os.ReadFile(filepath.Join(dir, agentDirName, statusFile)); err == nil {
		_ = json.Unmarshal(data, &st)
	}
	return st
}

// view turns a record and the agent's status into what the provider reports.
func (p *Provider) view(dir string, r *record) provider.Instance {
	in := r.Spec.Booting(r.ID, r.Address, r.CreatedAt)
	switch r.Phase {
	case phaseDeleting:
		in.State = provider.StateDeleting
		return in
	case phaseCreating:
		if !statefile.IsLocked(filepath.Join(dir, lockFileName)) {
			in.State = provider.StateFailed
			in.Reason = "creating the instance was interrupted (herd stopped in the middle): delete it, or create it again to complete it"
		}
		return in
	}
	st := readStatus(dir)
	running := hostproc.Alive(r.AgentPID, r.AgentStartTime)
	switch {
	case st.Phase == agentFailed:
		in.State, in.Reason = provider.StateFailed, st.Reason
		if in.Reason == "" {
			in.Reason = "the agent reported a failure without a reason: see " + filepath.Join(dir, agentLogName)
		}
	case st.Phase == agentStopping || st.Phase == agentStopped:
		in.State = provider.StateFailed
		in.Reason = fmt.Sprintf("the agent was stopped from outside herd (status %s)", st.Phase)
		if st.Reason != "" {
			in.Reason += ": " + st.Reason
		}
	case !running:
		in.State = provider.StateFailed
		in.Reason = "agent exited unexpectedly; " + hostproc.LogTail(filepath.Join(dir, agentLogName), 5)
	case st.Phase == agentReady:
		in.State = provider.StateReady
	}
	return in
}
