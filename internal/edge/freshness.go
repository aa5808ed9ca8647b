package edge

import (
	"net/http"
	"time"
)

// heuristicStatus are the status codes RFC 9110 section 15.1 defines as heuristically cacheable:
// only these may be given a freshness lifetime the origin did not state.
var heuristicStatus = map[int]bool{
	200: true, 203: true, 204: true, 206: true, 300: true, 301: true, 308: true,
	404: true, 405: true, 410: true, 414: true, 501: true,
}

// maxHeuristic bounds a Last-Modified based lifetime, as common caches do.
const maxHeuristic = 24 * time.Hour

// freshnessLifetime computes how long r stays fresh (RFC 9111 section 4.2.1), within the policy's
// bounds. explicit reports whether the origin stated it (s-maxage, max-age or Expires).
func freshnessLifetime(status int, h http.Header, cc directives, responseTime time.Time, p Policy) (life time.Duration, explicit bool) {
	if p.IgnoreOrigin {
		return p.DefaultTTL, false
	}
	if d, ok := cc.seconds("s-maxage"); ok {
		return p.clamp(d), true
	}
	if d, ok := cc.seconds("max-age"); ok {
		return p.clamp(d), true
	}
	if v := h.Get("Expires"); v != "" || len(h.Values("Expires")) > 0 {
		exp, ok := httpDate(v)
		if !ok {
			return p.clamp(0), true // an invalid Expires means already expired (section 5.3)
		}
		date, ok := httpDate(h.Get("Date"))
		if !ok {
			date = responseTime
		}
		return p.clamp(max(0, exp.Sub(date))), true
	}
	if !heuristicStatus[status] && !cc.has("public") {
		return 0, false
	}
	if p.DefaultTTL > 0 {
		return p.clamp(p.DefaultTTL), false
	}
	if lm, ok := httpDate(h.Get("Last-Modified")); ok {
		date, ok := httpDate(h.Get("Date"))
		if !ok {
			date = responseTime
		}
		if date.After(lm) {
			return p.clamp(min(date.Sub(lm)/10, maxHeuristic)), false
		}
	}
	return p.clamp(0), false
}

// clamp bounds a lifetime by the policy's minimum and maximum TTL.
func (p Policy) clamp(d time.Duration) time.Duration {
	if p.MaxTTL > 0 && d > p.MaxTTL {
		d = p.MaxTTL
	}
	if d < p.MinTTL {
		d = p.MinTTL
	}
	return d
}

// storable says why a response to req may not be stored by a shared cache (RFC 9111 section 3),
// or "" when it may. The caller has already checked the method and the size.
func storable(req *http.Request, reqCC directives, status int, h http.Header, cc directives, life time.Duration, explicit bool) string {
	switch {
	case status < 200 || status == http.StatusPartialContent || status == http.StatusNotModified:
		return "status"
	case reqCC.has("no-store") || cc.has("no-store"):
		return "no-store"
	case cc.has("private"):
		return "private"
	case req.Header.Get("Authorization") != "" && !cc.has("public") && !cc.has("s-maxage") && !cc.has("must-revalidate"):
		return "authorization"
	case varyStar(h):
		return "vary"
	case len(h.Values("Set-Cookie")) > 0:
		// Allowed by the RFC, but a cookie set for one client must never reach another.
		return "set-cookie"
	case !explicit && !heuristicStatus[status] && !cc.has("public"):
		return "status"
	case life <= 0 && h.Get("ETag") == "" && h.Get("Last-Modified") == "":
		return "no freshness and no validator"
	}
	return ""
}

// varyStar reports whether Vary names "*": such a response never matches a later request.
func varyStar(h http.Header) bool {
	for _, v := range h.Values("Vary") {
		for _, name := range splitList(v) {
			if name == "*" {
				return true
			}
		}
	}
	return false
}

// forbidsStale reports whether a response with Cache-Control cc may never be served stale, not even
// on error: must-revalidate, and in a shared cache proxy-revalidate and s-maxage (RFC 9111 section
// 5.2.2).
func forbidsStale(cc directives) bool {
	return cc.has("must-revalidate") || cc.has("proxy-revalidate") || cc.has("s-maxage")
}

// staleWithin reports whether an object stale by `stale` is still within the window a stale-*
// directive (RFC 5861) of the response or of the request gives.
func (o *object) staleWithin(directive string, reqCC directives, stale time.Duration) bool {
	if o.forbidsStale {
		return false
	}
	w := o.staleIfError
	if directive == "stale-while-revalidate" {
		w = o.staleWhileRevalidate
	}
	if w >= 0 && stale <= w {
		return true
	}
	w, ok := reqCC.seconds(directive)
	return ok && stale <= w
}

// freshFor reports whether the object, at age, satisfies the request's own freshness demands
// (max-age, min-fresh, max-stale: RFC 9111 section 5.2.1) as well as its lifetime.
func (o *object) freshFor(reqCC directives, age time.Duration) bool {
	if o.noCache || reqCC.has("no-cache") {
		return false
	}
	if d, ok := reqCC.seconds("max-age"); ok && age > d {
		return false
	}
	life := o.lifetime
	if d, ok := reqCC.seconds("min-fresh"); ok {
		life -= d
	}
	if age < life {
		return true
	}
	if v, ok := reqCC.get("max-stale"); ok && !o.forbidsStale {
		if v == "" {
			return true
		}
		if d, ok := reqCC.seconds("max-stale"); ok && age-life <= d {
			return true
		}
	}
	return false
}
