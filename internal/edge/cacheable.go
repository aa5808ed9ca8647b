package edge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// backgroundTimeout bounds a revalidation that no client waits for.
const backgroundTimeout = 30 * time.Second

// serveCacheable answers a GET or HEAD: from a fresh stored response, from a stale one within
// stale-while-revalidate, or from the origin, coalesced with other misses for the same key.
func (e *Edge) serveCacheable(w http.ResponseWriter, r *http.Request, b *Behavior) {
	pk := primaryKey(r, b.Policy)
	reqCC := requestDirectives(r.Header)
	coalesce := b.Coalesce
	coding := ""
	if b.Policy.Compress {
		coding = negotiate(r.Header)
	}
	for {
		now := e.now()
		if coding != "" {
			if c := e.store.lookup(pk, r, b.Policy, coding); c != nil && c.freshFor(reqCC, c.age(now)) {
				e.metrics.hits.Inc()
				e.serveObject(w, r, c, now, "Hit")
				return
			}
		}
		stored := e.store.lookup(pk, r, b.Policy, "")
		if stored != nil {
			age := stored.age(now)
			if stored.freshFor(reqCC, age) {
				e.metrics.hits.Inc()
				e.serveObject(w, r, e.encoded(pk, stored, coding), now, "Hit")
				return
			}
			if !reqCC.has("no-cache") && !stored.noCache &&
				stored.staleWithin("stale-while-revalidate", reqCC, age-stored.lifetime) {
				e.revalidateInBackground(pk, r, b, stored)
				e.metrics.hits.Inc()
				e.serveObject(w, r, e.encoded(pk, stored, coding), now, "StaleHit")
				return
			}
		}
		if reqCC.has("only-if-cached") {
			http.Error(w, "not in cache", http.StatusGatewayTimeout)
			return
		}
		if r.Header.Get("Range") != "" && e.flights.uncacheable(pk) {
			// The last response for the key was not stored (too large, say): the part asked
			// for is asked of the origin, with the client's Range and conditionals.
			e.answer(w, r, e.passOn(r, b))
			return
		}
		land := func() {}
		if coalesce && !e.flights.uncacheable(pk) {
			f, leader := e.flights.join(pk)
			if !leader {
				e.metrics.coalesced.Inc()
				f.wait(r.Context(), b.CoalesceWait)
				coalesce = false // once: the second look either hits or goes to the origin itself
				continue
			}
			land = func() { e.flights.land(pk, f) }
		}
		res := e.fetch(r, b, pk, reqCC, stored)
		land()
		if res.obj != nil {
			res.obj = e.encoded(pk, res.obj, coding)
		}
		e.answer(w, r, res)
		return
	}
}

// fetched is what one origin exchange left: a stored object to serve, or a response to stream.
type fetched struct {
	obj    *object
	xcache string
	resp   *http.Response
	prefix []byte // body bytes of resp already read
	err    error
}

// fetch asks the origin for r (validating stored when there is one) and stores what may be stored.
func (e *Edge) fetch(r *http.Request, b *Behavior, pk string, reqCC directives, stored *object) fetched {
	reqTime := e.now()
	purges := e.purges.Load()
	resp, err := e.roundTrip(r, b, true, stored)
	respTime := e.now()
	staleOnError := func() bool {
		return stored != nil && stored.staleWithin("stale-if-error", reqCC, stored.age(respTime)-stored.lifetime)
	}
	if err != nil {
		if staleOnError() {
			return fetched{obj: stored, xcache: "StaleHit"}
		}
		return fetched{err: err}
	}
	switch {
	case resp.StatusCode == http.StatusNotModified && stored != nil:
		resp.Body.Close()
		o := stored.refreshed(resp.Header, reqTime, respTime, b.Policy)
		e.put(pk, r, b.Policy, o, purges)
		e.metrics.validations.Inc()
		return fetched{obj: o, xcache: "RefreshHit"}
	case isServerError(resp.StatusCode) && staleOnError():
		resp.Body.Close()
		return fetched{obj: stored, xcache: "StaleHit"}
	}
	cc := parseCacheControl(resp.Header)
	life, explicit := freshnessLifetime(resp.StatusCode, resp.Header, cc, respTime, b.Policy)
	reason := storable(r, reqCC, resp.StatusCode, resp.Header, cc, life, explicit)
	if reason == "" && resp.ContentLength > b.MaxObjectSize {
		reason = "size"
	}
	var prefix []byte
	if reason == "" {
		body, err := readBody(resp, b.MaxObjectSize)
		if err != nil {
			resp.Body.Close()
			return fetched{err: fmt.Errorf("reading the origin's response: %w", err)}
		}
		if int64(len(body)) <= b.MaxObjectSize {
			resp.Body.Close()
			header := resp.Header // the exchange's own: kept, not copied
			dropHop(header)
			if b.Policy.Compress && compressible(resp.StatusCode, header, len(body), cc) {
				varyOnEncoding(header) // served identity or coded by the client's Accept-Encoding
			}
			o := newObject(resp.StatusCode, header, body, reqTime, respTime, life)
			if e.put(pk, r, b.Policy, o, purges) {
				e.flights.clear(pk)
				e.metrics.stores.Inc()
			}
			return fetched{obj: o, xcache: "Miss"}
		}
		prefix, reason = body, "size"
	}
	e.log.Debug("response not stored", "key", pk, "status", resp.StatusCode, "reason", reason)
	e.flights.markUncacheable(pk, b.HitForMiss)
	if reason == "size" && r.Header.Get("Range") != "" {
		// The client wants a part of an object too large to store: the origin is asked for that
		// part rather than the edge passing the whole object on.
		resp.Body.Close()
		return e.passOn(r, b)
	}
	return fetched{resp: resp, prefix: prefix, xcache: "Miss"}
}

// passOn sends r to the origin as it is, nothing to be stored.
func (e *Edge) passOn(r *http.Request, b *Behavior) fetched {
	resp, err := e.roundTrip(r, b, false, nil)
	if err != nil {
		return fetched{err: err}
	}
	return fetched{resp: resp, xcache: "Pass"}
}

// answer writes what fetch produced.
func (e *Edge) answer(w http.ResponseWriter, r *http.Request, res fetched) {
	switch {
	case res.err != nil:
		e.originFailed(w, res.err)
	case res.obj != nil:
		if res.xcache == "Miss" {
			e.metrics.misses.Inc()
		} else {
			e.metrics.hits.Inc()
		}
		e.serveObject(w, r, res.obj, e.now(), res.xcache)
	default:
		e.metrics.misses.Inc()
		defer res.resp.Body.Close()
		e.stream(w, r, res.resp, res.prefix, res.xcache)
	}
}

// revalidateInBackground validates a stale object served under stale-while-revalidate, unless a
// request for the key is already at the origin.
func (e *Edge) revalidateInBackground(pk string, r *http.Request, b *Behavior, stored *object) {
	f, leader := e.flights.join(pk)
	if !leader {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), backgroundTimeout)
	bg := r.Clone(ctx)
	go func() {
		defer cancel()
		defer e.flights.land(pk, f)
		res := e.fetch(bg, b, pk, directives{}, stored)
		if res.resp != nil {
			res.resp.Body.Close()
		}
		if res.err != nil && !errors.Is(res.err, context.Canceled) {
			e.log.Warn("background revalidation failed", "key", pk, "err", res.err)
		}
	}()
}

// isServerError reports the statuses stale-if-error may hide (RFC 5861 section 4).
func isServerError(status int) bool {
	switch status {
	case 500, 502, 503, 504:
		return true
	}
	return false
}

// readBody reads an origin's body to store, at most limit+1 bytes: into one buffer of the length the
// origin announced when it announced one, so that reading it leaves no garbage of grown buffers
// behind. A body of unannounced length, read into a growing buffer, is copied into one of its
// length when the spare capacity is more than the allocator's rounding: the memory tier weighs what
// a body holds, and a buffer grown by doubling may hold twice the body. A body shorter than
// announced is an error, as it is to io.ReadAll.
func readBody(resp *http.Response, limit int64) ([]byte, error) {
	if n := resp.ContentLength; n >= 0 && n <= limit {
		body := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, body); err != nil {
			return nil, err
		}
		return body, nil
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err == nil && cap(body) > allocSize(len(body)) {
		body = bytes.Clone(body)
	}
	return body, err
}
