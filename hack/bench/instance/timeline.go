package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"herd.dev/herd/internal/agent"
)

// event is one point of an instance's boot timeline.
type event struct {
	at   time.Duration // since Create was called
	name string
}

// timeline puts the agent's boot steps (st, its status.json) on one time axis with what the
// benchmark saw itself, events, counted from created, when Create was called: each component's
// start and first readiness, the API server's first answer, node Ready, each workload's (add-ons'
// included) availability, and the app's first answer.
func timeline(st agent.Status, created time.Time, events []event) string {
	all := append([]event(nil), events...)
	if !st.StartedAt.IsZero() {
		offset := st.StartedAt.Sub(created)
		all = append(all, event{at: offset, name: "agent started"})
		for _, s := range st.Steps {
			all = append(all, event{at: offset + time.Duration(s.Seconds*float64(time.Second)), name: s.Name})
		}
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].at < all[j].at })
	var b strings.Builder
	b.WriteString("  boot timeline (s after Create was called):\n")
	for _, e := range all {
		fmt.Fprintf(&b, "  %8.3f  %s\n", e.at.Seconds(), e.name)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
