package edge

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Edge is one edge location: an http.Handler that serves from its cache and goes to the origin for
// what it lacks.
type Edge struct {
	// cfg is swapped whole by Reconfigure; a request reads it once and keeps its behavior.
	cfg       atomic.Pointer[Config]
	transport http.RoundTripper
	store     *store
	flights   *coalescer
	metrics   *Metrics
	log       *slog.Logger
	now       func() time.Time
	// purges counts invalidations by pattern: a response fetched while one happened is served but
	// not stored, since it may be the very content the invalidation was meant to drop.
	purges atomic.Int64
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
	e := &Edge{
		transport: cfg.Transport,
		store:     newStore(cfg.MaxBytes),
		flights:   newCoalescer(),
		metrics:   newMetrics(cfg.MetricLabels),
		log:       log.With("component", "edge"),
		now:       time.Now,
	}
	if cfg.DiskDir != "" {
		if e.store.disk, err = openDisk(cfg.DiskDir, cfg.DiskBytes, e.log); err != nil {
			return nil, err
		}
	}
	e.metrics.watchMemory(e.store, cfg.MetricLabels)
	e.cfg.Store(&cfg)
	return e, nil
}

// Close writes what the disk tier has queued, and stops its writer.
func (e *Edge) Close() {
	if e.store.disk != nil {
		e.store.disk.close()
	}
}

// Reconfigure replaces the behaviors and the memory bound of a running edge, keeping what it has
// stored: a changed origin or policy applies to the next request. Its Transport, MetricLabels and
// disk tier stay those New was given.
func (e *Edge) Reconfigure(cfg Config) error {
	cfg.Transport = e.transport
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if old := e.cfg.Load(); old.MaxBytes != cfg.MaxBytes {
		e.store.c.SetMaximum(uint64(cfg.MaxBytes))
	}
	e.cfg.Store(&cfg)
	return nil
}

// Metrics returns the edge's counters, to register with Prometheus.
func (e *Edge) Metrics() *Metrics { return e.metrics }

// ServeHTTP answers r from the cache or the origin.
func (e *Edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.metrics.requests.Inc()
	b := e.cfg.Load().behavior(r.URL.Path)
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

// put stores o unless an invalidation by pattern happened since the exchange that produced it
// began (purges is the count then), and reports whether it did.
func (e *Edge) put(pk string, r *http.Request, p Policy, o *object, purges int64) bool {
	if e.purges.Load() != purges {
		return false
	}
	vary := varyNames(o.header())
	if p.Compress {
		// The origin is never asked for a coding (originRequest): its Vary: Accept-Encoding, and
		// the one the edge adds, select nothing the identity depends on.
		vary = slices.DeleteFunc(vary, func(n string) bool { return n == "Accept-Encoding" })
	}
	e.store.put(pk, r, p, o, vary)
	return true
}

// Invalidate drops every stored object whose path, or path and query, matches one of patterns (as
// behaviors' path patterns match: '*' any run of characters, '?' one), on every host, and returns
// how many URIs it dropped. Responses on their way from the origin meanwhile are served but not
// stored.
func (e *Edge) Invalidate(patterns []string) int {
	e.purges.Add(1)
	n := 0
	for pk := range e.store.keys() {
		target := pk[max(strings.IndexByte(pk, '/'), 0):]
		path, _, _ := strings.Cut(target, "?")
		for _, p := range patterns {
			if MatchPath(p, path) || MatchPath(p, target) {
				if e.store.invalidate(pk) {
					e.metrics.invalidations.Inc()
					n++
				}
				break
			}
		}
	}
	return n
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
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok { // the client's body, not the origin
		http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
		return
	}
	e.log.Warn("origin request failed", "err", err)
	e.metrics.originErrors.Inc()
	http.Error(w, "origin unreachable", http.StatusBadGateway)
}

// Stats are the edge's figures, from the counters its Metrics export.
func (e *Edge) Stats() Stats { return e.metrics.Stats() }
