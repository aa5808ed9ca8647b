package lb

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
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

// This file is the net/http engine: it serves HTTP/2 (h2c and over TLS) and h2c targets, and
// HTTP/1.x clients when the fast engine is off. net/http reads and writes the messages; the proxy core
// (core.go) does the rest.

// netExchange is one request served by net/http.
type netExchange struct {
	l       *listener
	w       http.ResponseWriter
	r       *http.Request
	body    *retryableBody // nil without a body
	upgrade string         // the protocol the client asked to switch to, if any
	key     pickKey
	start   time.Time
}

// ServeHTTP proxies one request.
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
	tlsOn := st.tlsOn
	if st.hosts != nil {
		router := l
		if l, st = st.routed([]byte(r.Host)); l == nil {
			router.unknownHost(&netExchange{l: router, w: w, r: r, start: start}, []byte(r.Host), start)
			return
		}
	}
	x := &netExchange{l: l, w: w, r: r, start: start}
	if r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
		var rc io.ReadCloser = r.Body
		if r.ContentLength < 0 {
			rc = http.MaxBytesReader(w, rc, st.maxBody)
		}
		// The transport closes a request's body when it fails; this keeps it open for a retry.
		x.body = &retryableBody{rc: rc}
		r.Body = x.body
		// A target may answer while still reading the body (streaming, echo): keep reading it after our
		// response starts, which HTTP/1.1 servers otherwise refuse. HTTP/2 is full duplex already.
		if r.ProtoMajor == 1 {
			_ = http.NewResponseController(w).EnableFullDuplex()
		}
	}
	x.upgrade = prepareRequest(r, tlsOn)
	x.key = st.routes.keyOf(r)
	l.forward(r.Context(), st, x, &x.key, idempotent(r.Method), start)
}

func (x *netExchange) attempt(st *listenerState, t *target) outcome {
	r := x.r
	r.URL.Host = t.key.addr
	resp, err := t.transport.Load().RoundTrip(r)
	if err == nil {
		x.respond(st, t, resp)
		return outcome{done: true}
	}
	if r.Context().Err() != nil {
		// The client went away: not the target's fault.
		clientGone(t, x.start)
		return outcome{done: true}
	}
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		x.l.reject(x.w, r, http.StatusRequestEntityTooLarge, "request body too large")
		return outcome{done: true}
	}
	return outcome{kind: classify(err), err: err, bodySent: x.body != nil && x.body.read.Load()}
}

func (x *netExchange) fail(code int) { writeError(x.w, code) }

func (x *netExchange) client() netip.Addr {
	ap, _ := netip.ParseAddrPort(x.r.RemoteAddr)
	return ap.Addr().Unmap()
}

func (x *netExchange) refuse(code, retryAfter int, body string) {
	h := x.w.Header()
	h["Content-Type"] = textPlain
	h["X-Content-Type-Options"] = noSniff
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	x.w.WriteHeader(code)
	_, _ = io.WriteString(x.w, body)
}

// prepareRequest turns the inbound request into the outbound one in place (nothing else reads it once
// the handler runs): hop-by-hop headers go, X-Forwarded-For/Proto come. It returns the protocol the
// client asked to upgrade to, if any.
func prepareRequest(r *http.Request, tlsOn bool) (upgrade string) {
	h := r.Header
	for _, v := range h["Connection"] {
		connectionTokens(v, func(name string) {
			if strings.EqualFold(name, "upgrade") {
				upgrade = h.Get("Upgrade")
			}
			if !isFramingHeader(name) {
				h.Del(name)
			}
		})
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
func (x *netExchange) respond(st *listenerState, t *target, resp *http.Response) {
	w, r := x.w, x.r
	if resp.StatusCode == http.StatusSwitchingProtocols {
		x.switchProtocols(st, t, resp)
		return
	}
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
	if c := st.stickyCookie(t, x.key.cookie); c != "" {
		h["Set-Cookie"] = append(h["Set-Cookie"], c)
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
		st.brokeOff(t, err, x.start)
		panic(http.ErrAbortHandler)
	}
	if err != nil {
		clientGone(t, x.start)
		return
	}
	st.answered(t, resp.StatusCode, x.start)
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
		connectionTokens(v, func(name string) {
			if !isFramingHeader(name) {
				h.Del(name)
			}
		})
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

// switchProtocols completes an upgrade (WebSocket and the like): the client connection is taken over and
// bytes flow both ways until either side closes.
func (x *netExchange) switchProtocols(st *listenerState, t *target, resp *http.Response) {
	backend, ok := resp.Body.(io.ReadWriteCloser)
	got := resp.Header.Get("Upgrade")
	if !ok || x.upgrade == "" || !strings.EqualFold(got, x.upgrade) {
		resp.Body.Close()
		st.misbehaved(t, fmt.Errorf("target switched protocols to %q without an agreed upgrade (asked %q)", got, x.upgrade), x.start)
		writeError(x.w, http.StatusBadGateway)
		return
	}
	defer backend.Close()
	conn, brw, err := http.NewResponseController(x.w).Hijack()
	if err != nil {
		writeError(x.w, http.StatusBadGateway)
		t.stats.observe(Class5xx, time.Since(x.start))
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
		clientGone(t, x.start)
		return
	}
	st.switched(t, x.start)
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
	// What is left has no exported type or value to test with errors.Is or errors.As: net/http's
	// badStringError ("malformed HTTP response", "malformed HTTP status code") and
	// errServerClosedIdle (a pooled connection the target closed), and the bundled HTTP/2
	// transport's GoAwayError, errClientConnGotGoAway and "connection lost" (HTTP/2 losing its
	// connection). Only their words identify them.
	msg := err.Error()
	if strings.Contains(msg, "malformed HTTP") {
		return failBadResponse
	}
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
