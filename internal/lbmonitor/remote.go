package lbmonitor

import (
	"sync"
	"time"

	"herd.dev/herd/internal/lb"
)

// Remote is a Monitor of a load balancer elsewhere (a region's), read over its admin API.
type Remote struct {
	*Monitor
	src *adminObserved
}

// NewRemote returns a Remote reading admin.
func NewRemote(admin lb.AdminClient) *Remote {
	// Short calls: the Monitor reads under its lock, and the controller and the autoscaler wait.
	admin.Timeout = 2 * time.Second
	src := &adminObserved{admin: &admin}
	return &Remote{Monitor: New(src, Options{}), src: src}
}

// OK reports whether the last read succeeded (true before the first: the Monitor reads then).
func (r *Remote) OK() bool { return r.src.ok() }

// adminObserved is a load balancer's health and counters read over its admin API. A read that
// fails answers the last snapshot read (counters that do not move, rather than counters back at
// zero, which would read as a burst when the next read succeeds) and marks the source not ok.
type adminObserved struct {
	admin *lb.AdminClient

	mu     sync.Mutex
	last   lb.Snapshot
	failed bool
}

func (a *adminObserved) Health() []lb.TargetHealth {
	h, err := a.admin.TargetHealth()
	if err != nil {
		return nil
	}
	return h
}

func (a *adminObserved) Metrics() lb.Snapshot {
	snap, err := a.admin.Stats()
	a.mu.Lock()
	defer a.mu.Unlock()
	if err != nil {
		a.failed = true
		return a.last
	}
	a.last, a.failed = snap, false
	return snap
}

// ok reports whether the last read succeeded (true before the first: the Monitor reads then).
func (a *adminObserved) ok() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return !a.failed
}
