package lb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"herd.dev/herd/internal/fnvmix"
)

// State is a target's health as the load balancer sees it.
type State string

const (
	// StateUnknown: active checks have not answered yet; the target gets no traffic.
	StateUnknown State = "unknown"
	// StateHealthy: the target gets traffic.
	StateHealthy State = "healthy"
	// StateUnhealthy: active checks failed; the target gets no traffic.
	StateUnhealthy State = "unhealthy"
	// StateEjected: passive checks ejected the target for a while; it gets no traffic.
	StateEjected State = "ejected"
	// StateDraining: the target was removed; it gets no new traffic while its in-flight requests finish.
	StateDraining State = "draining"
)

// stateRank orders states from best to worst.
var stateRank = map[State]int{StateHealthy: 0, StateUnknown: 1, StateDraining: 2, StateUnhealthy: 3, StateEjected: 4}

// Worse reports whether s is worse than other (healthy, unknown, draining, unhealthy, ejected,
// from best to worst): an instance reports the worst state of its listeners' targets.
func (s State) Worse(other State) bool { return stateRank[s] > stateRank[other] }

// TargetHealth is the health of one target, as reported by (*LB).Health.
type TargetHealth struct {
	Listener string `json:"listener"`
	Fleet    string `json:"fleet"`
	Group    string `json:"group"`
	ID       string `json:"id"`
	Address  string `json:"address"`
	State    State  `json:"state"`
	// Since is when State last changed.
	Since time.Time `json:"since"`
	// LastError is the last failed check or proxied request, if any.
	LastError string `json:"lastError,omitempty"`
	InFlight  int64  `json:"inFlight"`
	// RTT is the round-trip time to the target that active checks measure (the kernel's smoothed
	// RTT of their connections), absent until measured.
	RTT Duration `json:"rtt,omitempty"`
}

// targetKey identifies a target across Applies: same listener, group, ID and address means the same
// target, whose health, counters and connections carry over.
type targetKey struct {
	listener, fleet, group, id, addr string
}

// target is the live state of one backend of one listener.
type target struct {
	key    targetKey
	log    *slog.Logger
	cookie string // the sticky-cookie value naming this target
	hash   uint64 // the target's identity for rendezvous hashing

	stats counters

	// The routing verdict is three flags so the hot path reads them without locks.
	checked  atomic.Bool // active checks have given a first verdict
	healthy  atomic.Bool // verdict of active checks
	ejected  atomic.Bool // passively ejected, until a timer clears it
	draining atomic.Bool

	rtt         atomic.Int64 // round-trip time measured by active checks (nanoseconds), 0 until measured
	fails5xx    atomic.Int32 // consecutive 5xx answers or timeouts
	ejectStreak atomic.Int32 // ejections since the last success, for the backoff

	transport atomic.Pointer[http.Transport] // for the net/http path (HTTP/2 clients, TLS, h2c targets)
	transSet  transportSettings
	conns     connSet

	h1mu   sync.Mutex // guards h1idle
	h1idle []*bconn   // idle connections of the HTTP/1.x engine

	mu           sync.Mutex // guards the fields below
	since        time.Time
	lastState    State
	lastError    string
	checkCfg     HealthCheck
	checkBackend BackendProtocol
	stopCheck    context.CancelFunc
	stopDrain    context.CancelFunc
	ejectCfg     HealthCheck

	wake *waker // signalled when the target becomes usable; nil in tests that build targets alone
	// changes receives the target's state changes and failed requests; nil in tests that build
	// targets alone. errorNoticed is when failed requests were last sent (unix nanoseconds).
	changes      *changeHub
	errorNoticed atomic.Int64
}

// transportSettings are the listener settings a target's connections depend on.
type transportSettings struct {
	connect, response time.Duration
	backend           BackendProtocol
}

func newTarget(key targetKey, log *slog.Logger) *target {
	sum := fnvmix.FNV1a(key.listener + "\x00" + key.id)
	return &target{
		key:       key,
		log:       log.With("listener", key.listener, "group", key.group, "target", key.id, "address", key.addr),
		cookie:    strconv.FormatUint(sum, 36),
		hash:      sum,
		since:     time.Now(),
		lastState: StateUnknown,
	}
}

// usable reports whether the target may take a new request.
func (t *target) usable() bool {
	return t.healthy.Load() && !t.ejected.Load() && !t.draining.Load()
}

func (t *target) state() State {
	switch {
	case t.draining.Load():
		return StateDraining
	case t.ejected.Load():
		return StateEjected
	case t.healthy.Load():
		return StateHealthy
	case t.checked.Load():
		return StateUnhealthy
	default:
		return StateUnknown
	}
}

func (t *target) health() TargetHealth {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.noteStateLocked()
	return TargetHealth{
		Listener: t.key.listener, Fleet: t.key.fleet, Group: t.key.group, ID: t.key.id, Address: t.key.addr,
		State: t.lastState, Since: t.since, LastError: t.lastError, InFlight: t.stats.inFlight.Load(),
		RTT: Duration(t.rtt.Load()),
	}
}

// noteStateLocked records when the state changed, for Since.
func (t *target) noteStateLocked() {
	if s := t.state(); s != t.lastState {
		t.lastState, t.since = s, time.Now()
		if t.wake != nil && t.usable() {
			t.wake.signal()
		}
		t.changes.send(TargetChange{Fleet: t.key.fleet, ID: t.key.id, State: s})
	}
}

func (t *target) setError(err error) {
	t.mu.Lock()
	t.lastError = err.Error()
	t.noteStateLocked()
	t.mu.Unlock()
}

// setTransport gives the target a transport for the listener's current settings; the old one, if the
// settings changed, closes its idle connections once its requests are done (busy ones close on drain).
func (t *target) setTransport(s transportSettings) {
	if old := t.transport.Load(); old != nil && t.transSet == s {
		return
	}
	t.transSet = s
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return t.dial(ctx, s.connect)
		},
		// A big idle pool per target keeps connections to backends alive under any load.
		MaxIdleConns:          0,
		MaxIdleConnsPerHost:   1024,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: s.response,
		ExpectContinueTimeout: time.Second,
		// The proxy passes bodies through as they are; transparent gzip would change them.
		DisableCompression: true,
	}
	tr.Protocols = new(http.Protocols)
	if s.backend == BackendH2C {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	if old := t.transport.Swap(tr); old != nil {
		time.AfterFunc(time.Minute, old.CloseIdleConnections)
	}
}

// dialError marks a failure to connect, which is always safe to retry on another target.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

func (t *target) dial(ctx context.Context, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	c, err := d.DialContext(ctx, "tcp", t.key.addr)
	if err != nil {
		return nil, &dialError{err}
	}
	return t.conns.add(c), nil
}

// eject takes the target out of rotation for a backoff that doubles with each ejection in a row.
func (t *target) eject(reason error) {
	t.mu.Lock()
	cfg := t.ejectCfg
	t.mu.Unlock()
	if cfg.Paused || !t.ejected.CompareAndSwap(false, true) {
		return
	}
	n := t.ejectStreak.Add(1)
	backoff := cfg.EjectionTime.D() << min(n-1, 16)
	backoff = min(backoff, cfg.MaxEjectionTime.D())
	t.stats.ejections.Add(1)
	t.fails5xx.Store(0)
	t.setError(reason)
	t.log.Warn("target ejected", "reason", reason, "backoff", backoff, "ejections_in_a_row", n)
	time.AfterFunc(backoff, func() {
		t.ejected.Store(false)
		t.mu.Lock()
		t.noteStateLocked()
		t.mu.Unlock()
	})
}

// observe feeds a proxied request's outcome to passive health checking: a connection that failed (err
// set, not a timeout) ejects the target at once; 5xx answers and timeouts eject it after threshold in a row.
func (t *target) observe(code int, err error, timeout bool, threshold int) {
	if err != nil || code >= 500 {
		t.noteErrors()
	}
	switch {
	case err != nil && !timeout:
		t.eject(err)
	case err != nil || code >= 500:
		if int(t.fails5xx.Add(1)) >= threshold {
			if err == nil {
				err = fmt.Errorf("%d answers of 5xx in a row", threshold)
			}
			t.eject(err)
		}
	default:
		// A success ends the streaks, so the next ejection starts with the short backoff again.
		if t.fails5xx.Load() != 0 {
			t.fails5xx.Store(0)
		}
		if t.ejectStreak.Load() != 0 {
			t.ejectStreak.Store(0)
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// close stops the target's checks and closes every connection it has, idle or busy.
func (t *target) close() {
	t.mu.Lock()
	if t.stopCheck != nil {
		t.stopCheck()
		t.stopCheck = nil
	}
	t.mu.Unlock()
	if tr := t.transport.Load(); tr != nil {
		tr.CloseIdleConnections()
	}
	t.flushH1()
	t.conns.closeAll()
}

// connSet tracks a target's open connections so draining can close them at its deadline.
type connSet struct {
	mu sync.Mutex
	m  map[*trackedConn]struct{}
}

func (s *connSet) add(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, set: s}
	s.mu.Lock()
	if s.m == nil {
		s.m = map[*trackedConn]struct{}{}
	}
	s.m[tc] = struct{}{}
	s.mu.Unlock()
	return tc
}

func (s *connSet) remove(tc *trackedConn) {
	s.mu.Lock()
	delete(s.m, tc)
	s.mu.Unlock()
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	conns := make([]*trackedConn, 0, len(s.m))
	for c := range s.m {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// trackedConn is a backend connection that leaves its connSet when closed.
type trackedConn struct {
	net.Conn
	set    *connSet
	closed atomic.Bool
}

// Unwrap returns the underlying connection, for idleClean's peek.
func (c *trackedConn) Unwrap() net.Conn { return c.Conn }

func (c *trackedConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		c.set.remove(c)
	}
	return c.Conn.Close()
}
