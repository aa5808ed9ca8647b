package local

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/statefile"
)

// Phases of the provider's own record of an instance (not the agent's phase).
const (
	// phaseCreating: the record holds the instance's allocation; the network and the agent may
	// be partly set up. A creating record whose instance lock is free was left by a Create that
	// was interrupted; the next Create completes it, Delete removes it.
	phaseCreating = "creating"
	// phaseCreated: the agent was started and its pid recorded.
	phaseCreated = "created"
	// phaseDeleting: Delete started; the next Delete finishes it.
	phaseDeleting = "deleting"
)

// record is instance.json: the provider's record of one instance.
type record struct {
	// Spec is the spec Create was given, with Image replaced by the resolved bundle digest.
	Spec provider.InstanceSpec `json:"spec"`
	// ID is the provider ID: unique per creation, so that a re-created name is a new instance.
	ID    string `json:"id"`
	Phase string `json:"phase"`
	// BundleDir is the bundle the agent boots from.
	BundleDir string `json:"bundleDir"`
	// Address is the instance IP on the region's bridge, PrefixLen its subnet's prefix length,
	// Gateway the bridge's address.
	Address   string `json:"address"`
	PrefixLen int    `json:"prefixLength"`
	Gateway   string `json:"gateway"`
	// Bridge is the host bridge of the instance's region.
	Bridge string `json:"bridge"`
	// Netns is the network namespace's name (/run/netns/<Netns>).
	Netns string `json:"netns"`
	// HostVeth is the host end of the instance's veth pair (the other end is eth0 in Netns).
	HostVeth string `json:"hostVeth"`
	// CgroupRoot is the cgroup every process of the instance runs under, in every hierarchy.
	CgroupRoot string    `json:"cgroupRoot"`
	CreatedAt  time.Time `json:"createdAt"`
	// AgentPID is the agent's pid and AgentStartTime its start time in clock ticks after boot
	// (field 22 of /proc/<pid>/stat), so that a reused pid is not taken for the agent.
	AgentPID       int    `json:"agentPid,omitempty"`
	AgentStartTime uint64 `json:"agentStartTime,omitempty"`
}

// Files of an instance directory.
const (
	recordFile   = "instance.json"
	lockFileName = "lock"
	agentDirName = "agent"
	agentLogName = "agent.log"
	// credentialFileName holds the instance's credential, which its agent requires (agentauth).
	credentialFileName = "credential"
	statusFile         = "status.json"
)

// readRecord returns the record in dir, or nil (and no error) when there is none.
func readRecord(dir string) (*record, error) {
	data, err := os.ReadFile(filepath.Join(dir, recordFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read instance record: %w", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("instance record %s: %w", filepath.Join(dir, recordFile), err)
	}
	return &r, nil
}

// writeRecord writes the record into dir atomically (temp file, fsync, rename), mode 0600.
func writeRecord(dir string, r *record) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encode instance record: %w", err)
	}
	return statefile.WriteAtomic(filepath.Join(dir, recordFile), append(data, '\n'))
}
