package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// keepLogs copies an instance's logs, the agent's (agent.log in the instance's directory) and
// its components' (agent/logs/*.log: etcd, containerd, kube-combined or each component), into
// dst, which it makes. They are a few hundred kilobytes: each is read whole.
func keepLogs(instanceDir, dst string) error {
	files, err := filepath.Glob(filepath.Join(instanceDir, "agent", "logs", "*.log"))
	if err != nil {
		return err
	}
	files = append(files, filepath.Join(instanceDir, "agent.log"))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("-logs: %w", err)
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("-logs: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), data, 0o644); err != nil {
			return fmt.Errorf("-logs: %w", err)
		}
	}
	return nil
}
