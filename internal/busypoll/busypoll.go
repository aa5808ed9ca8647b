// Package busypoll keeps a process that runs Go's scheduler on one thread (GOMAXPROCS=1) polling the
// network for a short while after work, instead of letting its core halt at once.
//
// Go's runtime blocks in epoll_wait whenever no goroutine is runnable. On a virtual machine whose
// guest does not poll before halting (cpuidle-haltpoll with guest_halt_poll_ns=0, for one), the core
// then halts, and the next packet that arrives for the process costs the sending core an
// inter-processor interrupt, a VM exit, to wake it. A load balancer that needs less CPU per request
// than its clients and targets can feed it idles between bursts and pays that on every burst.
//
// The poller is a goroutine that, until the process has been idle for its window, looks at the
// runtime's own epoll descriptor with poll(2) and a zero timeout, yielding to every runnable goroutine
// between looks. When the descriptor has events it parks for a microsecond, which leaves the scheduler
// nothing to run, so the scheduler polls the network itself (without blocking) and runs the goroutines
// that were waiting. Once the window passes with nothing to do the poller parks until a request begins
// (Activity), and the process sleeps as it would without it: a busy process polls through its short
// gaps, and a quiet one polls for one window after each burst.
//
// With more than one scheduler thread the runtime keeps a thread blocked in the network poller and
// spins threads of its own, so the poller is for GOMAXPROCS=1 only.
package busypoll

import (
	"errors"
	"sync/atomic"
)

// ErrNotOneProc is returned by Start when GOMAXPROCS is not 1.
var ErrNotOneProc = errors.New("busy polling needs GOMAXPROCS=1: with more scheduler threads Go's runtime keeps one blocked in the network poller")

// running is the process's poller, if any: the runtime has one epoll descriptor, so there is one.
var running atomic.Pointer[poller]

// wake is how Activity resumes a parked poller.
type wake struct {
	parked atomic.Bool
	ch     chan struct{} // buffered 1: only the Activity that flips parked sends
}

// Activity tells a parked poller that work has arrived, so it polls again. Call it where a request
// begins; it costs an atomic load when no poller is parked.
func Activity() {
	if p := running.Load(); p != nil && p.wake.parked.Load() && p.wake.parked.CompareAndSwap(true, false) {
		p.wake.ch <- struct{}{}
	}
}
