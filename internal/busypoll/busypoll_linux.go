package busypoll

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// poller watches the runtime's epoll descriptor, epfd.
type poller struct {
	epfd   int
	window time.Duration
	// handoffs counts the looks that found the network ready, parks the windows that passed idle.
	handoffs atomic.Uint64
	parks    atomic.Uint64
	wake     wake
	stop     chan struct{}
	done     chan struct{}
}

// Start runs the process's poller until stop is called: it polls until the process has been idle
// for window. It fails when GOMAXPROCS is not 1, when a poller already runs, or when the runtime's
// epoll descriptor cannot be found; the process then simply runs without one.
func Start(window time.Duration) (stop func(), err error) {
	if window <= 0 {
		return nil, fmt.Errorf("busy polling: window %v: must be positive", window)
	}
	if runtime.GOMAXPROCS(0) != 1 {
		return nil, ErrNotOneProc
	}
	epfd, err := runtimeEpoll()
	if err != nil {
		return nil, fmt.Errorf("busy polling: finding the runtime's epoll descriptor: %w", err)
	}
	p := &poller{epfd: epfd, window: window, stop: make(chan struct{}), done: make(chan struct{})}
	p.wake.ch = make(chan struct{}, 1)
	if !running.CompareAndSwap(nil, p) {
		return nil, errors.New("busy polling: a poller already runs in this process")
	}
	go p.run()
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			close(p.stop)
			<-p.done
			running.CompareAndSwap(p, nil)
		}
	}, nil
}

// runtimeEpoll finds the runtime's epoll descriptor: the one epoll instance that a pipe, which os
// registers with the runtime's network poller, is a target of (/proc/self/fdinfo lists an epoll
// instance's targets as "tfd:" lines).
func runtimeEpoll() (int, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	defer r.Close()
	defer w.Close()
	// Through SyscallConn, since File.Fd would put the pipe in blocking mode.
	rc, err := r.SyscallConn()
	if err != nil {
		return -1, err
	}
	var target string
	if err := rc.Control(func(fd uintptr) { target = fmt.Sprintf("tfd: %8d ", fd) }); err != nil {
		return -1, err
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1, err
	}
	for _, e := range ents {
		if link, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + e.Name())
		if err == nil && strings.Contains(string(info), target) {
			return strconv.Atoi(e.Name())
		}
	}
	return -1, errors.New("no epoll instance watches the runtime's descriptors")
}

// run polls until stopped. idleSince is when the poller last found nothing after work, zero while
// work goes on.
func (p *poller) run() {
	defer close(p.done)
	// poll(2) with a zero timeout reads the epoll instance's ready list and registers nothing, so
	// looking costs the cores that deliver packets nothing (an epoll instance watching it would be
	// woken by every event the runtime's receives).
	fds := []unix.PollFd{{Fd: int32(p.epfd), Events: unix.POLLIN}}
	var idleSince time.Time
	for {
		// Every runnable goroutine runs before each look, so the poller delays none of them.
		runtime.Gosched()
		select {
		case <-p.stop:
			return
		default:
		}
		if n, _ := unix.Poll(fds, 0); n > 0 {
			// Parking on a timer leaves the scheduler with nothing runnable, so it polls the
			// network (without blocking) and runs what waited, then this goroutine.
			p.handoffs.Add(1)
			time.Sleep(time.Microsecond)
			idleSince = time.Time{}
			continue
		}
		now := time.Now()
		if idleSince.IsZero() {
			idleSince = now
		}
		if now.Sub(idleSince) < p.window {
			continue
		}
		// Nothing within the window: stop polling until a request begins (Activity).
		p.parks.Add(1)
		p.wake.parked.Store(true)
		select {
		case <-p.wake.ch:
		case <-p.stop:
			return
		}
		idleSince = time.Time{}
	}
}
