package lb

import (
	"context"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"herd.dev/herd/internal/h1"
)

// This file is the proxy core that both HTTP engines share: picking a target (and holding the request
// while none can take it), one retry on another target within the listener's budget, sticky sessions,
// the hop-by-hop header rules, and the statistics and passive health every request feeds. An engine
// only reads and writes HTTP: the fast one (h1*.go) its own HTTP/1.1 bytes, the other (proxy.go)
// through net/http's server and transport.

// exchange is one client request in the hands of an engine.
type exchange interface {
	// attempt sends the request to t and relays its answer to the client. When the outcome is done
	// the engine has settled the request (and recorded it with the helpers below); otherwise nothing
	// reached the client and the core decides between a retry and an error answer.
	attempt(st *listenerState, t *target) outcome
	// fail answers the client with a proxy error: 503 (no target), 502 (the target failed) or 504
	// (the target was too slow).
	fail(code int)
	// refuse answers the client with code and a plain-text body saying why (an unknown tenant),
	// and with retryAfter > 0, a Retry-After of that many seconds.
	refuse(code, retryAfter int, body string)
	// client is the address the request came from.
	client() netip.Addr
}

// outcome is how an attempt on one target ended.
type outcome struct {
	done     bool // the request is settled: answered, or given up because of the client
	kind     failure
	err      error
	reused   bool // the attempt ran on a kept-alive connection of the fast engine's pool
	bodySent bool // some of the request body was taken from the client: no retry
}

// failure is what went wrong with an attempt, which decides retry and health consequences.
type failure int

const (
	failOther       failure = iota // the request itself was unusable, for example an invalid header: no retry
	failConnect                    // no connection could be opened: retry any request
	failBroken                     // the connection broke before any response: retry idempotent requests
	failTimeout                    // the target was too slow: no retry, counts like a 5xx
	failBadResponse                // the target answered something that is not HTTP: no retry, counts like a 5xx
)

// forward serves one request: it picks a target, holding the request while none can take it if the
// listener holds, attempts it, and on a failure that nothing reached the client from, retries once on
// another target when the failure allows and the budget has room, or answers with an error.
func (l *listener) forward(ctx context.Context, st *listenerState, x exchange, key *pickKey, idem bool, start time.Time) {
	if st.refused != nil && !l.admitCaller(st, x, start) {
		return
	}
	if st.routes.tenants != nil {
		release, ok := l.admitTenant(ctx, st, x, key, start)
		if !ok {
			return
		}
		defer release()
	}
	l.budget.deposit()
	var tried *target
	for {
		t := st.routes.pick(key, tried)
		if t == nil && tried == nil {
			if st.routes.tenants != nil {
				l.claim(st, key)
			}
			st, t = l.hold(ctx, st, key)
		}
		if t == nil {
			if tried == nil {
				x.fail(http.StatusServiceUnavailable)
				l.stats.observe(Class5xx, time.Since(start))
			} else {
				// The retry found no other target: answer for the first failure.
				x.fail(http.StatusBadGateway)
				tried.stats.observe(Class5xx, time.Since(start))
			}
			return
		}
		// An upgraded connection stays in flight for its whole life: attempt returns when it ends.
		t.stats.inFlight.Add(1)
		o := x.attempt(st, t)
		t.stats.inFlight.Add(-1)
		if o.done {
			return
		}
		t.setError(o.err)
		switch {
		case o.reused && o.kind == failBroken:
			// A kept-alive connection the target had closed says little about the target; its other idle
			// ones are likely closed too.
			t.flushH1()
		case o.kind == failBadResponse:
			t.observe(http.StatusBadGateway, nil, false, st.threshold5xx)
		case o.kind != failOther:
			t.observe(0, o.err, o.kind == failTimeout, st.threshold5xx)
		}
		retry := tried == nil && st.retry && !o.bodySent &&
			(o.kind == failConnect || (o.kind == failBroken && idem))
		if retry && l.budget.take() {
			t.stats.retries.Add(1)
			tried = t
			continue
		}
		code := http.StatusBadGateway
		if o.kind == failTimeout {
			code = http.StatusGatewayTimeout
		}
		l.log.Debug("proxy failed", "target", t.key.id, "error", o.err)
		x.fail(code)
		t.stats.observe(Class5xx, time.Since(start))
		return
	}
}

// answered records an answer relayed whole to the client.
func (st *listenerState) answered(t *target, code int, start time.Time) {
	t.observe(code, nil, false, st.threshold5xx)
	t.stats.observe(classOf(code), time.Since(start))
}

// brokeOff records a target that broke off in the middle of its answer: the client saw a truncated
// answer, and the target is to blame.
func (st *listenerState) brokeOff(t *target, err error, start time.Time) {
	t.setError(err)
	t.observe(0, err, isTimeout(err), st.threshold5xx)
	t.stats.observe(Class5xx, time.Since(start))
}

// clientGone records a request given up because its client went away or could not be written to: not
// the target's fault.
func clientGone(t *target, start time.Time) {
	t.stats.observe(ClassFailed, time.Since(start))
}

// misbehaved records a target that answered in a way the proxy cannot relay (for example an upgrade
// nobody asked for); the engine answers 502.
func (st *listenerState) misbehaved(t *target, err error, start time.Time) {
	t.setError(err)
	t.observe(http.StatusBadGateway, nil, false, st.threshold5xx)
	t.stats.observe(Class5xx, time.Since(start))
}

// switched records a completed protocol upgrade.
func (st *listenerState) switched(t *target, start time.Time) {
	t.stats.observe(Class1xx, time.Since(start))
	t.observe(http.StatusSwitchingProtocols, nil, false, st.threshold5xx)
}

// stickyCookie returns the Set-Cookie value that pins the client to t, or "" when the listener has no
// sticky cookie or the client's cookie (sent) already names t.
func (st *listenerState) stickyCookie(t *target, sent string) string {
	if st.routes.cookie == "" || sent == t.cookie {
		return ""
	}
	v := st.routes.cookie + "=" + t.cookie + "; Path=/; HttpOnly; SameSite=Lax"
	if st.tlsOn {
		v += "; Secure"
	}
	return v
}

// hopHeaders are meaningful for one connection only (RFC 9110 section 7.6.1, and the Proxy-* fields of
// RFC 9110 section 11.7) and never forwarded as received, in either direction. Each engine writes the
// ones its own connections need (Connection, Upgrade, "TE: trailers", Transfer-Encoding, Trailer).
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// framingHeaders are never dropped for being named in a Connection header: dropping them would make
// the target read the message differently from the client.
var framingHeaders = []string{"Content-Length", "Host", "Transfer-Encoding"}

// forwardedHeaders are the proxy's to write: it appends the client's address to X-Forwarded-For and
// replaces X-Forwarded-Proto.
var forwardedHeaders = []string{"X-Forwarded-For", "X-Forwarded-Proto"}

// isHopHeader reports whether a field name is among hopHeaders, case-insensitively.
func isHopHeader[T string | []byte](name T) bool {
	return inFold(name, hopHeaders)
}

// isFramingHeader reports whether a field name is among framingHeaders, case-insensitively.
func isFramingHeader[T string | []byte](name T) bool {
	return inFold(name, framingHeaders)
}

func inFold[T string | []byte](name T, list []string) bool {
	for _, h := range list {
		if h1.EqFold(name, h) {
			return true
		}
	}
	return false
}

// connectionTokens calls f with each field name a Connection header value lists.
func connectionTokens(value string, f func(name string)) {
	for value != "" {
		var tok string
		tok, value, _ = strings.Cut(value, ",")
		if tok = strings.TrimSpace(tok); tok != "" {
			f(tok)
		}
	}
}
