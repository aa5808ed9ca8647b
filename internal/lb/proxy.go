package lb

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Header values shared by every request: never mutated, so one slice serves all.
var (
	protoHTTP     = []string{"http"}
	protoHTTPS    = []string{"https"}
	teTrailers    = []string{"trailers"}
	connUpgrade   = []string{"Upgrade"}
	textPlain     = []string{"text/plain; charset=utf-8"}
	noSniff       = []string{"nosniff"}
	connClose     = []string{"close"}
	copyBufs      = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}
	errBodyBroken = errors.New("response body broken")
)

// hopHeaders are meaningful for one connection only (RFC 9110 section 7.6.1) and never forwarded.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// ServeHTTP proxies one request. It is the hot path: it takes no locks and, for a plain keep-alive
// GET, allocates only the X-Forwarded-For value.
func (l *listener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	st := l.state.Load()
	switch {
	case len(r.Header) > st.maxHeaders:
		l.reject(w, r, http.StatusRequestHeaderFieldsTooLarge, "too many header fields")
		return
	case r.ContentLength > st.maxBody:
		l.reject(w, r, http.StatusRequestEntityTooLarge, "request body too large")
		return
	case r.Method == http.MethodConnect:
		l.reject(w, r, http.StatusMethodNotAllowed, "CONNECT is not proxied")
		return
	}
	var body *retryableBody
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		var rc io.ReadCloser = r.Body
		if r.ContentLength < 0 {
			rc = http.MaxBytesReader(w, rc, st.maxBody)
		}
		// The transport closes a request's body when it fails; this keeps it open for a retry.
		body = &retryableBody{rc: rc}
		r.Body = body
		// A target may answer while still reading the body (streaming, echo): keep reading it after our
		// response starts, which HTTP/1.1 servers otherwise refuse. HTTP/2 is full duplex already.
		if r.ProtoMajor == 1 {
			_ = http.NewResponseController(w).EnableFullDuplex()
		}
	}
	upgrade := prepareRequest(r, st.tlsOn)
	l.budget.deposit()

	key := st.routes.keyOf(r)
	var tried *target
	for {
		t := st.routes.pick(&key, tried)
		if t == nil && tried == nil {
			st, t = l.hold(r.Context(), st, &key)
		}
		if t == nil {
			if tried == nil {
				l.noTarget(w, r, start)
				return
			}
			// The retry found no other target: answer for the first failure.
			l.failed(w, r, tried, http.StatusBadGateway, start)
			return
		}
		t.stats.inFlight.Add(1)
		r.URL.Host = t.key.addr
		resp, err := t.transport.Load().RoundTrip(r)
		if err == nil {
			l.respond(w, r, t, resp, upgrade, start, st)
			return
		}
		t.stats.inFlight.Add(-1)
		if r.Context().Err() != nil {
			// The client went away: not the target's fault.
			t.stats.observe(ClassFailed, time.Since(start))
			return
		}
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			l.reject(w, r, http.StatusRequestEntityTooLarge, "request body too large")
			return
		}
		kind := classify(err)
		t.setError(err)
		if kind != failOther {
			t.observe(0, err, kind == failTimeout, st.threshold5xx)
		}
		bodyUnread := body == nil || !body.read.Load()
		retry := tried == nil && st.retry && bodyUnread &&
			(kind == failConnect || (kind == failBroken && idempotent(r.Method)))
		if retry && l.budget.take() {
			t.stats.retries.Add(1)
			tried = t
			continue
		}
		code := http.StatusBadGateway
		if kind == failTimeout {
			code = http.StatusGatewayTimeout
		}
		l.log.Debug("proxy failed", "target", t.key.id, "error", err)
		l.failed(w, r, t, code, start)
		return
	}
}

// prepareRequest turns the inbound request into the outbound one in place (nothing else reads it once
// the handler runs): hop-by-hop headers go, X-Forwarded-For/Proto come. It returns the protocol the
// client asked to upgrade to, if any.
func prepareRequest(r *http.Request, tlsOn bool) (upgrade string) {
	h := r.Header
	if conn := h["Connection"]; len(conn) > 0 {
		// Headers named in Connection are hop-by-hop as well.
		for _, v := range conn {
			for _, name := range strings.Split(v, ",") {
				name = strings.TrimSpace(name)
				if strings.EqualFold(name, "upgrade") {
					upgrade = h.Get("Upgrade")
				}
				if name != "" {
					h.Del(name)
				}
			}
		}
	}
	te := h["Te"]
	for _, k := range hopHeaders {
		delete(h, k)
	}
	for _, v := range te {
		// "TE: trailers" is what gRPC needs end to end; other TE values are hop-by-hop.
		if strings.Contains(strings.ToLower(v), "trailers") {
			h["Te"] = teTrailers
			break
		}
	}
	if upgrade != "" && r.ProtoMajor == 1 {
		h["Connection"] = connUpgrade
		h["Upgrade"] = []string{upgrade}
	} else {
		upgrade = ""
	}
	ip := clientIP(r.RemoteAddr)
	if prior := h["X-Forwarded-For"]; len(prior) > 0 {
		ip = strings.Join(prior, ", ") + ", " + ip
	}
	h["X-Forwarded-For"] = []string{ip}
	if tlsOn {
		h["X-Forwarded-Proto"] = protoHTTPS
	} else {
		h["X-Forwarded-Proto"] = protoHTTP
	}
	r.URL.Scheme = "http"
	// The client's wish to close is for its own connection; backend connections stay alive.
	r.Close = false
	r.RequestURI = ""
	return upgrade
}

func clientIP(remote string) string {
	if host, _, err := net.SplitHostPort(remote); err == nil {
		return host
	}
	return remote
}

// respond copies a target's response to the client.
func (l *listener) respond(w http.ResponseWriter, r *http.Request, t *target, resp *http.Response, upgrade string, start time.Time, st *listenerState) {
	if resp.StatusCode == http.StatusSwitchingProtocols {
		l.switchProtocols(w, r, t, resp, upgrade, start)
		return
	}
	defer t.stats.inFlight.Add(-1)
	removeHopHeaders(resp.Header)
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	if len(resp.Trailer) > 0 {
		names := make([]string, 0, len(resp.Trailer))
		for k := range resp.Trailer {
			names = append(names, k)
		}
		h["Trailer"] = []string{strings.Join(names, ", ")}
	}
	if st.routes.cookie != "" {
		l.setStickyCookie(w, r, t, st)
	}
	w.WriteHeader(resp.StatusCode)
	// Stream as it comes when the length is unknown (server-sent events, gRPC); else let net/http buffer.
	err := copyBody(w, resp.Body, resp.ContentLength < 0)
	resp.Body.Close()
	for k, vv := range resp.Trailer {
		if _, announced := h[k]; !announced {
			k = http.TrailerPrefix + k
		}
		h[k] = vv
	}
	if err != nil && r.Context().Err() == nil && errors.Is(err, errBodyBroken) {
		// The target broke off mid-body: abort the client connection rather than end the response cleanly,
		// so the client sees the truncation.
		t.setError(err)
		t.observe(0, err, false, st.threshold5xx)
		t.stats.observe(Class5xx, time.Since(start))
		panic(http.ErrAbortHandler)
	}
	if err != nil {
		t.stats.observe(ClassFailed, time.Since(start))
		return
	}
	t.observe(resp.StatusCode, nil, false, st.threshold5xx)
	t.stats.observe(classOf(resp.StatusCode), time.Since(start))
}

// copyBody copies a response body, telling a broken source (errBodyBroken) from a gone client.
func copyBody(w http.ResponseWriter, src io.Reader, flush bool) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var flusher http.Flusher
	if flush {
		flusher, _ = w.(http.Flusher)
	}
	for {
		n, rerr := src.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("%w: %w", errBodyBroken, rerr)
		}
	}
}

func removeHopHeaders(h http.Header) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// switchProtocols completes an upgrade (WebSocket and the like): the client connection is taken over and
// bytes flow both ways until either side closes. The request stays in flight for the connection's life.
func (l *listener) switchProtocols(w http.ResponseWriter, r *http.Request, t *target, resp *http.Response, upgrade string, start time.Time) {
	defer t.stats.inFlight.Add(-1)
	backend, ok := resp.Body.(io.ReadWriteCloser)
	got := resp.Header.Get("Upgrade")
	if !ok || upgrade == "" || !strings.EqualFold(got, upgrade) {
		resp.Body.Close()
		l.log.Debug("target switched protocols without an agreed upgrade", "target", t.key.id, "asked", upgrade, "got", got)
		writeError(w, http.StatusBadGateway)
		t.stats.observe(Class5xx, time.Since(start))
		return
	}
	defer backend.Close()
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, http.StatusBadGateway)
		t.stats.observe(Class5xx, time.Since(start))
		return
	}
	defer conn.Close()
	// The server's request deadlines do not apply to the upgraded connection.
	_ = conn.SetDeadline(time.Time{})
	removeHopHeaders(resp.Header)
	resp.Header["Connection"] = connUpgrade
	resp.Header["Upgrade"] = []string{got}
	fmt.Fprintf(brw, "HTTP/1.1 101 %s\r\n", http.StatusText(http.StatusSwitchingProtocols))
	_ = resp.Header.Write(brw)
	_, _ = brw.WriteString("\r\n")
	if err := brw.Flush(); err != nil {
		t.stats.observe(ClassFailed, time.Since(start))
		return
	}
	t.stats.observe(Class1xx, time.Since(start))
	done := make(chan struct{}, 2)
	go func() {
		_, _ = io.Copy(backend, brw) // brw first holds whatever the client sent after its request
		done <- struct{}{}
	}()
	go func() {
		_, _ = io.Copy(conn, backend)
		done <- struct{}{}
	}()
	// When either side ends, end both: the deferred closes unblock the other copy.
	<-done
}

func (l *listener) setStickyCookie(w http.ResponseWriter, r *http.Request, t *target, st *listenerState) {
	if c, err := r.Cookie(st.routes.cookie); err == nil && c.Value == t.cookie {
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: st.routes.cookie, Value: t.cookie, Path: "/", HttpOnly: true,
		Secure: st.tlsOn, SameSite: http.SameSiteLaxMode,
	})
}

// noTarget answers 503: no target of the listener is healthy.
func (l *listener) noTarget(w http.ResponseWriter, r *http.Request, start time.Time) {
	writeError(w, http.StatusServiceUnavailable)
	l.stats.observe(Class5xx, time.Since(start))
}

func (l *listener) failed(w http.ResponseWriter, r *http.Request, t *target, code int, start time.Time) {
	writeError(w, code)
	t.stats.observe(Class5xx, time.Since(start))
}

// reject answers a request the proxy will not forward, and logs it.
func (l *listener) reject(w http.ResponseWriter, r *http.Request, code int, why string) {
	l.badRequest(r.RemoteAddr, fmt.Sprintf("%d %s", code, why))
	// The unread body makes the connection unusable: close it after this answer.
	w.Header()["Connection"] = connClose
	writeError(w, code)
	l.stats.observe(Class4xx, 0)
}

func writeError(w http.ResponseWriter, code int) {
	h := w.Header()
	h["Content-Type"] = textPlain
	h["X-Content-Type-Options"] = noSniff
	w.WriteHeader(code)
	_, _ = io.WriteString(w, http.StatusText(code)+"\n")
}

func idempotent(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	return false
}

// failure is what went wrong with an attempt, which decides retry and health consequences.
type failure int

const (
	failOther   failure = iota // the request itself was unusable, for example an invalid header: no retry
	failConnect                // no connection could be opened: retry any request
	failBroken                 // the connection broke before any response: retry idempotent requests
	failTimeout                // the target was too slow: no retry, counts like a 5xx
)

func classify(err error) failure {
	var de *dialError
	var oe *net.OpError
	switch {
	case errors.As(err, &de):
		return failConnect
	case isTimeout(err):
		return failTimeout
	case errors.As(err, &oe), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return failBroken
	}
	// net/http does not export these: a pooled connection the target closed, and HTTP/2 losing its
	// connection.
	msg := err.Error()
	if strings.Contains(msg, "server closed idle connection") || strings.Contains(msg, "connection lost") ||
		strings.Contains(msg, "GOAWAY") || strings.Contains(msg, "connection broken") {
		return failBroken
	}
	return failOther
}

// retryableBody keeps the request body open when the transport closes it after a failed attempt, and
// remembers whether any of it was sent (then the request cannot be retried).
type retryableBody struct {
	rc   io.ReadCloser
	read atomic.Bool // set by the transport's writer goroutine
}

func (b *retryableBody) Read(p []byte) (int, error) {
	b.read.Store(true)
	return b.rc.Read(p)
}

// Close is a no-op: net/http closes the inbound body itself when the handler returns.
func (b *retryableBody) Close() error { return nil }
