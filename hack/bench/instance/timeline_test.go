package main

import (
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/agent"
)

// The agent's steps, counted from its own start, land on the benchmark's axis, counted from
// Create, in order with the benchmark's own events.
func TestTimeline(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	st := agent.Status{
		StartedAt: created.Add(400 * time.Millisecond),
		Steps: []agent.Step{
			{Name: "etcd started", Seconds: 0.1},
			{Name: "Deployment default/hello available", Seconds: 5},
		},
	}
	got := timeline(st, created, []event{
		{at: 2 * time.Second, name: "Create returned"},
		{at: 6 * time.Second, name: "app answered from the host"},
	})
	want := strings.Join([]string{
		"  boot timeline (s after Create was called):",
		"     0.400  agent started",
		"     0.500  etcd started",
		"     2.000  Create returned",
		"     5.400  Deployment default/hello available",
		"     6.000  app answered from the host",
	}, "\n")
	if got != want {
		t.Errorf("timeline:\n%s\nwant:\n%s", got, want)
	}
}
