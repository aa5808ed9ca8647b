package edge

import (
	"log/slog"
	"net/http"
	"time"
)

// Edge is one edge location: an http.Handler that serves from its cache and goes to the origin for
// what it lacks.
type Edge struct {
	cfg     Config
	store   *store
	flights *coalescer
	metrics *Metrics
	log     *slog.Logger
	now     func() time.Time
}

// New makes an edge location from cfg.
func New(cfg Config, log *slog.Logger) (*Edge, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.Default()
	}
	return &Edge{
		cfg:     cfg,
		store:   newStore(cfg.MaxBytes),
		flights: newCoalescer(),
		metrics: newMetrics(),
		log:     log.With("component", "edge"),
		now:     time.Now,
	}, nil
}

// Metrics returns the edge's counters, to register with Prometheus.
func (e *Edge) Metrics() *Metrics { return e.metrics }

// ServeHTTP answers r from the cache or the origin.
func (e *Edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b := e.cfg.behavior(r.URL.Path)
	if b == nil {
		http.Error(w, "no behavior matches this path", http.StatusNotFound)
		return
	}
	if !b.allows(r.Method) {
		for _, m := range b.AllowedMethods {
			w.Header().Add("Allow", m)
		}
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		e.serveCacheable(w, r, b)
		return
	}
	e.pass(w, r, b)
}

// pass forwards a request the cache does not answer, and invalidates what an unsafe method that
// succeeded may have changed (RFC 9111 section 4.4): the target URI, and the Location and
// Content-Location of the same origin.
func (e *Edge) pass(w http.ResponseWriter, r *http.Request, b *Behavior) {
	resp, err := e.roundTrip(r, b, false, nil)
	if err != nil {
		e.originFailed(w, err)
		return
	}
	defer resp.Body.Close()
	if unsafeMethod(r.Method) && resp.StatusCode >= 200 && resp.StatusCode < 400 {
		e.invalidate(primaryKey(r, b.Policy))
		for _, name := range []string{"Location", "Content-Location"} {
			if pk, ok := sameOrigin(r, resp.Header.Get(name), b.Policy); ok {
				e.invalidate(pk)
			}
		}
	}
	e.metrics.misses.Inc()
	e.stream(w, r, resp, nil, "Pass")
}

func (e *Edge) invalidate(pk string) {
	if e.store.invalidate(pk) {
		e.metrics.invalidations.Inc()
	}
	e.flights.clear(pk)
}

// unsafeMethod reports whether a method may change the origin's state (RFC 9110 section 9.2.1).
func unsafeMethod(m string) bool {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// originFailed answers a request whose origin could not be reached.
func (e *Edge) originFailed(w http.ResponseWriter, err error) {
	e.log.Warn("origin request failed", "err", err)
	e.metrics.originErrors.Inc()
	http.Error(w, "origin unreachable", http.StatusBadGateway)
}
