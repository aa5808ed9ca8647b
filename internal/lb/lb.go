package lb

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrStopped is returned by Apply and Start once Start has returned.
var ErrStopped = errors.New("load balancer stopped")

// Options configure New.
type Options struct {
	// Logger receives the load balancer's logs; it gets a component=lb attribute. Default: discard.
	Logger *slog.Logger
	// Engine serves HTTP/1.x clients, in cleartext and over TLS. Default: EngineFast, or the value of the environment
	// variable HERD_LB_ENGINE when set, so that benchmarks can compare the engines on one binary.
	Engine Engine
	// ClientNetworks bounds how many client networks ClientRTTs remembers; the least recently
	// sampled are forgotten first. Default DefaultClientNetworks (4096).
	ClientNetworks int
}

// Engine names the code that reads and writes HTTP/1.x on client and target connections. Both engines
// share the proxy core (core.go): picking, retries, sticky sessions, hop-by-hop rules and statistics.
type Engine string

const (
	// EngineFast is herd's own HTTP/1.1 reader and writer (h1*.go), used where it can serve: cleartext
	// listeners with HTTP/1.1 targets. Elsewhere net/http serves.
	EngineFast Engine = "fast"
	// EngineNetHTTP serves every client with net/http's server and transport.
	EngineNetHTTP Engine = "net/http"
)

// LB is the load balancer: a set of listeners, each proxying to the healthy targets of its groups.
// All methods are safe for concurrent use.
type LB struct {
	log         *slog.Logger
	engine      Engine
	checker     *checker
	wake        waker // wakes requests held for a target
	changes     changeHub
	badRequests atomic.Uint64
	rtt         *rttTable
	tenants     tenantTable

	mu        sync.Mutex // guards the fields below; never taken on the request path
	cfg       Config
	sockets   map[string]*socket      // by socketKey
	listeners map[string]*listener    // by listener name
	targets   map[targetKey]*target   // routed and draining targets
	lstats    map[string]*counters    // by listener name, kept across listener rebuilds
	budgets   map[string]*retryBudget // by listener name
	running   bool
	stopped   bool
	bg        sync.WaitGroup // drains and retired listeners
	// removed holds, by fleet, the counts of the targets removed after their drain, so that a
	// fleet's counters (Metrics) never go down when its instances go: a rate over them would
	// read a drop as a reset and count everything since the start as new.
	removed map[string]Stats
}

// New returns a load balancer with no listeners. Apply a Config, then Start it.
func New(opts Options) *LB {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	log = log.With("component", "lb")
	engine := opts.Engine
	if engine == "" {
		engine = Engine(os.Getenv("HERD_LB_ENGINE"))
	}
	switch engine {
	case "", EngineFast, EngineNetHTTP:
	default:
		log.Warn("unknown HTTP/1.x engine, using the fast one", "engine", engine,
			"fix", `set HERD_LB_ENGINE to "fast" or "net/http"`)
	}
	if engine != EngineNetHTTP {
		engine = EngineFast
	}
	return &LB{
		log:       log,
		engine:    engine,
		checker:   newChecker(),
		sockets:   map[string]*socket{},
		listeners: map[string]*listener{},
		targets:   map[targetKey]*target{},
		lstats:    map[string]*counters{},
		removed:   map[string]Stats{},
		budgets:   map[string]*retryBudget{},
		rtt:       newRTTTable(opts.ClientNetworks),
	}
}

// Apply validates cfg and makes it the running state, atomically: on any error (an invalid field, a
// certificate that does not load, an address that cannot be bound) nothing changes. Requests in flight
// are never dropped; removed targets drain. A listener whose address stays keeps its socket open.
// Before Start, Apply binds sockets but serves nothing yet.
func (lb *LB) Apply(cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("invalid load balancer config: %w", err)
	}
	certs := make([]*tls.Certificate, len(cfg.Listeners))
	stamps := make([]certStamp, len(cfg.Listeners))
	for i, l := range cfg.Listeners {
		if l.TLS == nil {
			continue
		}
		// The stamp is taken before the files are read: a renewal in between makes it stale, and
		// the next look loads the pair again rather than missing the renewal.
		stamps[i], _ = stampOf(l.TLS)
		c, err := tls.LoadX509KeyPair(l.TLS.CertFile, l.TLS.KeyFile)
		if err != nil {
			return fmt.Errorf("listeners[%d].tls: %w", i, err)
		}
		certs[i] = &c
	}

	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.stopped {
		return ErrStopped
	}
	// Binding is the last step that can fail, so it comes first.
	socks := make([]*socket, len(cfg.Listeners))
	var opened []*socket
	for i, l := range cfg.Listeners {
		key := socketKey(l)
		if s := lb.sockets[key]; s != nil {
			socks[i] = s
			continue
		}
		ln, err := net.Listen("tcp", l.Address)
		if err != nil {
			for _, s := range opened {
				s.ln.Close()
			}
			return fmt.Errorf("listeners[%d] (%s): %w", i, l.Name, err)
		}
		s := newSocket(key, ln, lb.log.With("address", ln.Addr().String()), lb.rtt)
		opened = append(opened, s)
		socks[i] = s
	}

	// From here on nothing fails.
	kept := map[targetKey]bool{}
	listeners := map[string]*listener{}
	states := map[string]*listenerState{}
	var started, retired []*listener
	for i, lc := range cfg.Listeners {
		stats := lb.lstats[lc.Name]
		if stats == nil {
			stats = new(counters)
			lb.lstats[lc.Name] = stats
		}
		budget := lb.budgets[lc.Name]
		if budget == nil {
			budget = newRetryBudget()
			lb.budgets[lc.Name] = budget
		}
		budget.configure(lc.Retry)
		l := lb.listeners[lc.Name]
		if l == nil || l.sock != socks[i] || l.built != settingsOf(lc) {
			if l != nil {
				retired = append(retired, l)
			}
			l = newListener(lb, lc, socks[i], stats, budget)
			started = append(started, l)
		}
		if certs[i] != nil {
			l.cert.Store(certs[i])
			l.certSeen.Store(&stamps[i])
		}
		states[lc.Name] = lb.buildState(lc, kept, cfg.Callers)
		listeners[lc.Name] = l
	}
	// A host router's state points at the listeners just built (hosts.go).
	bindRoutes(cfg, listeners, states)
	for name, l := range listeners {
		l.state.Store(states[name])
	}
	for name, l := range lb.listeners {
		if listeners[name] == nil {
			retired = append(retired, l)
			delete(lb.lstats, name)
			delete(lb.budgets, name)
		}
	}
	sockets := map[string]*socket{}
	for i, lc := range cfg.Listeners {
		socks[i].handler.Store(listeners[lc.Name])
		sockets[socks[i].key] = socks[i]
	}
	for key, s := range lb.sockets {
		if sockets[key] == nil {
			s.close()
		}
	}
	lb.sockets, lb.listeners = sockets, listeners
	lb.wake.signal()
	if lb.running {
		for _, s := range opened {
			go s.serve()
		}
		for _, l := range started {
			l.start()
		}
	}
	for _, l := range retired {
		timeout := l.state.Load().drainTimeout
		lb.bg.Go(func() { l.shutdown(timeout) })
	}
	for key, t := range lb.targets {
		if !kept[key] && !t.draining.Load() {
			lb.drain(t, lb.drainTimeoutOf(key.listener, cfg))
		}
	}
	lb.cfg = cfg
	lb.log.Info("config applied", "listeners", len(cfg.Listeners), "targets", len(kept))
	return nil
}

// socketKey identifies a socket by the address it binds. Port 0 asks for a fresh port, so such a
// socket belongs to its listener's name instead.
func socketKey(l Listener) string {
	if isEphemeral(l.Address) {
		return l.Name + "@" + l.Address
	}
	return l.Address
}

// drainTimeoutOf is the drain timeout of a listener: its new one if it stays, else the old one.
func (lb *LB) drainTimeoutOf(name string, next Config) time.Duration {
	for _, cs := range []Config{next, lb.cfg} {
		for _, l := range cs.Listeners {
			if l.Name == name {
				return l.DrainTimeout.D()
			}
		}
	}
	return defaultDrainTimeout.D()
}

// buildState builds a listener's routing state, creating targets that are new and reviving draining
// ones that came back. It records every target it routes in kept. Called with lb.mu held.
func (lb *LB) buildState(lc Listener, kept map[targetKey]bool, callers map[netip.Addr]string) *listenerState {
	rt := &routes{nearest: lc.GroupPolicy == GroupNearest}
	switch lc.Policy.Type {
	case PolicyStickyCookie:
		rt.cookie = lc.Policy.Cookie
		rt.byCookie = map[string]*target{}
	case PolicyHeaderHash:
		rt.hashHeader = http.CanonicalHeaderKey(lc.Policy.Header)
	}
	ts := transportSettings{connect: lc.Timeouts.Connect.D(), response: lc.Timeouts.Response.D(), backend: lc.BackendProtocol}
	allZero := true
	for _, g := range lc.Groups {
		allZero = allZero && g.Weight == 0
	}
	var weights []int
	var tenantOf map[*target]string
	var all []*group
	if lc.Tenancy != nil {
		tenantOf = map[*target]string{}
	}
	for _, gc := range lc.Groups {
		g := &group{name: gc.Name, bal: newBalancer(lc.Policy.Type)}
		var tw []int
		for _, tc := range gc.Targets {
			key := targetKey{listener: lc.Name, fleet: lc.Fleet, group: gc.Name, id: tc.ID, addr: tc.Address}
			t := lb.targets[key]
			if t == nil {
				t = newTarget(key, lb.log)
				t.wake = &lb.wake
				t.changes = &lb.changes
				lb.targets[key] = t
			} else if t.draining.Load() {
				t.undrain()
			}
			t.setTransport(ts)
			t.startChecks(lb.checker, lc.HealthCheck, lc.BackendProtocol, lb.running)
			kept[key] = true
			if tenantOf != nil {
				tenantOf[t] = tc.Tenant
			}
			g.targets = append(g.targets, t)
			tw = append(tw, tc.Weight)
		}
		if lc.Policy.Type == PolicyWeighted {
			g.sched = smoothSchedule(tw)
		}
		w := gc.Weight
		if allZero {
			w = 1
		}
		all = append(all, g)
		if w == 0 || len(g.targets) == 0 {
			continue
		}
		rt.groups = append(rt.groups, g)
		weights = append(weights, w)
		if rt.byCookie != nil {
			for _, t := range g.targets {
				rt.byCookie[t.cookie] = t
			}
		}
	}
	rt.sched = smoothSchedule(weights)
	if lc.Tenancy != nil {
		// Every revision with targets of a tenant serves it, weight or not: a tenant is never sent
		// to another tenant's targets to follow a fleet-wide weight.
		rt.tenants = lb.buildTenants(lc, all, tenantOf)
	}
	return &listenerState{
		cfg:          lc,
		routes:       rt,
		maxBody:      lc.Limits.MaxBodyBytes,
		maxHeaders:   lc.Limits.MaxHeaders,
		threshold5xx: lc.HealthCheck.Consecutive5xx,
		retry:        !lc.Retry.Disabled,
		tlsOn:        lc.TLS != nil,
		drainTimeout: lc.DrainTimeout.D(),
		refused:      refusedCallers(lc, callers),
		h1:           lb.engine == EngineFast && lc.Protocol == ProtocolHTTP && lc.BackendProtocol == BackendHTTP1,
	}
}

// drain takes t out of service: no new requests; once those in flight finish, or at the deadline, its
// connections close. Called with lb.mu held.
func (lb *LB) drain(t *target, timeout time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	t.mu.Lock()
	t.draining.Store(true)
	t.stopDrain = cancel
	t.noteStateLocked()
	t.mu.Unlock()
	t.log.Info("target draining", "in_flight", t.stats.inFlight.Load(), "timeout", timeout)
	lb.bg.Go(func() {
		idle := t.waitIdle(ctx, timeout)
		lb.mu.Lock()
		if ctx.Err() != nil {
			// Revived by a later Apply.
			lb.mu.Unlock()
			return
		}
		delete(lb.targets, t.key)
		final := t.stats.snapshot()
		final.InFlight, final.Held = 0, 0 // gauges, not counts
		lb.removed[t.key.fleet] = lb.removed[t.key.fleet].Add(final)
		lb.mu.Unlock()
		t.close()
		if idle {
			t.log.Info("target drained")
		} else {
			t.log.Warn("drain deadline reached, connections closed", "in_flight", t.stats.inFlight.Load())
		}
	})
}

// waitIdle waits until t has nothing in flight, up to timeout or until ctx ends; it reports whether t is idle.
func (t *target) waitIdle(ctx context.Context, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for t.stats.inFlight.Load() > 0 {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
		}
	}
	return true
}

// undrain puts a draining target back in service. Called with lb.mu held.
func (t *target) undrain() {
	t.mu.Lock()
	if t.stopDrain != nil {
		t.stopDrain()
		t.stopDrain = nil
	}
	t.draining.Store(false)
	t.noteStateLocked()
	t.mu.Unlock()
	t.log.Info("target back in service")
}

// Start serves the applied config and blocks until ctx is done; then it stops accepting, lets requests
// in flight finish (up to each listener's drain timeout), closes everything and returns nil.
func (lb *LB) Start(ctx context.Context) error {
	lb.mu.Lock()
	if lb.stopped {
		lb.mu.Unlock()
		return ErrStopped
	}
	if lb.running {
		lb.mu.Unlock()
		return errors.New("load balancer already started")
	}
	lb.running = true
	for _, s := range lb.sockets {
		go s.serve()
	}
	for _, l := range lb.listeners {
		l.start()
	}
	for _, t := range lb.targets {
		t.resumeChecks(lb.checker)
	}
	lb.mu.Unlock()
	lb.log.Info("load balancer started")
	reloadCtx, stopReload := context.WithCancel(ctx)
	lb.bg.Go(func() { lb.reloadCerts(reloadCtx) })

	<-ctx.Done()
	stopReload()

	lb.mu.Lock()
	lb.stopped = true
	sockets, listeners, targets := lb.sockets, lb.allListeners(), lb.allTargets()
	lb.mu.Unlock()
	for _, s := range sockets {
		s.close()
	}
	lb.wake.signal() // held requests see the closed sockets and give up
	var wg sync.WaitGroup
	for _, l := range listeners {
		wg.Go(func() { l.shutdown(l.state.Load().drainTimeout) })
	}
	// Upgraded and TCP connections are not the http.Server's to wait for: wait on the targets as well.
	for _, t := range targets {
		timeout := lb.drainTimeoutOf(t.key.listener, Config{})
		wg.Go(func() {
			t.waitIdle(context.Background(), timeout)
			t.close()
		})
	}
	wg.Wait()
	lb.bg.Wait()
	for _, s := range sockets {
		<-s.done
	}
	lb.checker.close()
	lb.log.Info("load balancer stopped")
	return nil
}

// Addr returns the bound address of a listener (useful with port 0), or nil if there is no such listener.
func (lb *LB) Addr(listener string) net.Addr {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if l := lb.listeners[listener]; l != nil {
		return l.sock.ln.Addr()
	}
	return nil
}

// Config returns the applied config, with every default filled in.
func (lb *LB) Config() Config {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.cfg.WithDefaults()
}

// Health returns the health of every target, draining ones included, sorted by listener, group and ID.
func (lb *LB) Health() []TargetHealth {
	lb.mu.Lock()
	targets := lb.allTargets()
	lb.mu.Unlock()
	out := make([]TargetHealth, 0, len(targets))
	for _, t := range targets {
		out = append(out, t.health())
	}
	return out
}

// allTargets returns the targets sorted by listener, group and ID. Called with lb.mu held.
func (lb *LB) allTargets() []*target {
	out := make([]*target, 0, len(lb.targets))
	for _, t := range lb.targets {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b *target) int {
		return cmp.Or(cmp.Compare(a.key.listener, b.key.listener), cmp.Compare(a.key.group, b.key.group),
			cmp.Compare(a.key.id, b.key.id), cmp.Compare(a.key.addr, b.key.addr))
	})
	return out
}

// allListeners returns the listeners sorted by name. Called with lb.mu held.
func (lb *LB) allListeners() []*listener {
	out := make([]*listener, 0, len(lb.listeners))
	for _, l := range lb.listeners {
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b *listener) int { return cmp.Compare(a.name, b.name) })
	return out
}
