package main

import (
	"os"
	"path/filepath"
	"testing"
)

// The agent's log and each component's land in the destination with their contents.
func TestKeepLogs(t *testing.T) {
	inst := t.TempDir()
	if err := os.MkdirAll(filepath.Join(inst, "agent", "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"agent.log":         "agent\n",
		"kube-combined.log": "I1127 17:38:44.183270 main.go:182] starting\n",
		"etcd.log":          "etcd\n",
	}
	for name, body := range want {
		path := filepath.Join(inst, "agent", "logs", name)
		if name == "agent.log" {
			path = filepath.Join(inst, name)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "bench-1-0")
	if err := keepLogs(inst, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("%d files kept, want %d: %v", len(got), len(want), got)
	}
	for name, body := range want {
		b, err := os.ReadFile(filepath.Join(dst, name))
		if err != nil {
			t.Errorf("%s not kept: %v", name, err)
		} else if string(b) != body {
			t.Errorf("%s = %q, want %q", name, b, body)
		}
	}
}
