package lb

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

// changeLog records what OnTargetChange reports.
type changeLog struct {
	mu      sync.Mutex
	changes []TargetChange
}

func (l *changeLog) add(c TargetChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, c)
}

// count returns how many changes of target id match.
func (l *changeLog) count(id string, match func(TargetChange) bool) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, c := range l.changes {
		if c.ID == id && match(c) {
			n++
		}
	}
	return n
}

// Subscribers hear of every state change of a target, with its fleet, and of failed requests far
// less often than they fail: what lets the controller act on changes instead of polling.
func TestOnTargetChange(t *testing.T) {
	ok := newBackend(t, "ok", nil)
	failing := newBackend(t, "failing", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	l := New(Options{Logger: testLogger(t)})
	var log changeLog
	l.OnTargetChange(log.add)
	ln := httpListener(TargetGroup{Name: "r1", Targets: targets(ok, failing)})
	ln.HealthCheck.Consecutive5xx = 1000 // failed requests alone, no ejection
	if err := l.Apply(Config{Listeners: []Listener{ln}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.Start(ctx) }()
	defer func() { cancel(); <-done }()

	is := func(s State) func(TargetChange) bool {
		return func(c TargetChange) bool { return !c.Errors && c.State == s && c.Fleet == "web" }
	}
	waitFor(t, 5*time.Second, "both targets reported healthy", func() bool {
		return log.count("ok", is(StateHealthy)) == 1 && log.count("failing", is(StateHealthy)) == 1
	})

	client := newClient()
	const requests = 20
	failed := 0
	for range requests {
		if code, _, _ := get(t, client, url(l, "/")); code == http.StatusInternalServerError {
			failed++
		}
	}
	errs := func(c TargetChange) bool { return c.Errors && c.Fleet == "web" }
	if failed == 0 || log.count("failing", errs) == 0 {
		t.Fatalf("%d requests answered 500, %d error changes reported; want some of each", failed, log.count("failing", errs))
	}
	if n := log.count("failing", errs); n >= failed {
		t.Errorf("%d error changes for %d failed requests: they should be reported at most once a second", n, failed)
	}
	if n := log.count("ok", errs); n != 0 {
		t.Errorf("%d error changes reported for the target that answers 200", n)
	}

	failing.kill()
	waitFor(t, 5*time.Second, "the killed target reported unhealthy", func() bool {
		return log.count("failing", func(c TargetChange) bool {
			return !c.Errors && (c.State == StateUnhealthy || c.State == StateEjected)
		}) > 0
	})
	if err := l.Apply(Config{Listeners: []Listener{httpListener(TargetGroup{Name: "r1", Targets: targets(ok)})}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the removed target reported draining", func() bool {
		return log.count("failing", is(StateDraining)) == 1
	})
	if n := log.count("ok", func(c TargetChange) bool { return !c.Errors }); n != 1 {
		t.Errorf("the untouched target reported %d state changes, want its first verdict only", n)
	}
}
