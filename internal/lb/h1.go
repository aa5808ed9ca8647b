package lb

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// This file is herd's own HTTP/1.x server side, used for every cleartext HTTP/1.x client connection of
// an HTTP listener whose targets speak HTTP/1.1: it is the hot path, and net/http's general-purpose
// server costs more than twice its CPU per proxied request (a goroutine and a context per request,
// background reads, header maps). It parses strictly (RFC 9112) and refuses what is ambiguous, such as
// both Content-Length and Transfer-Encoding. HTTP/2 (h2c prior knowledge) is handed to net/http's
// server at the first request line; TLS listeners and h2c targets always use net/http (proxy.go).

const h1BufSize = 4096

// h1conn is one client connection served by the HTTP/1.x engine.
type h1conn struct {
	l      *listener
	c      *clientConn
	br     *bufio.Reader
	bw     *bufio.Writer
	ip     []byte // client address, for X-Forwarded-For
	active atomic.Bool

	readDL, writeDL time.Time // the deadlines set on c

	req  reqHead
	out  []byte // the request head sent to targets
	resp respHead

	// The request in flight, for the proxy core's calls back.
	key      pickKey
	start    time.Time
	bodyDone bool // the whole request body was read from the client
	keep     bool // the client connection may carry another request
}

// span is a slice of reqHead.raw or respHead.raw by offsets, so the buffer may grow underneath.
type span struct{ start, end int }

func (s span) in(b []byte) []byte { return b[s.start:s.end] }

type hdrLine struct {
	name, line span
	drop       bool
}

// reqHead is a parsed request head. Everything points into raw, reused from request to request.
type reqHead struct {
	raw            []byte
	method, target span
	minor          int // HTTP/1.minor
	hdrs           []hdrLine
	contentLength  int64 // -1 when absent
	chunked        bool
	hosts          int
	close          bool
	keepAlive      bool // HTTP/1.0 "Connection: keep-alive"
	upgradeAsked   bool // "upgrade" among the Connection tokens
	upgrade        span
	hasUpgrade     bool
	expectContinue bool
	teTrailers     bool
	connTokens     []span // other header names listed in Connection: hop-by-hop too
	xff            []span
	cookies        []span
	hashValue      span
	hasHash        bool
	absHost        span // the authority of an absolute-form target, forwarded as Host
	hasAbsHost     bool
	h2Preface      bool
}

func (r *reqHead) reset() {
	*r = reqHead{raw: r.raw[:0], hdrs: r.hdrs[:0], connTokens: r.connTokens[:0], xff: r.xff[:0], cookies: r.cookies[:0], contentLength: -1}
}

func (r *reqHead) hasBody() bool { return r.chunked || r.contentLength > 0 }

// httpError is a request the engine refuses, with the status to answer.
type httpError struct {
	code int
	why  string
}

func (e *httpError) Error() string { return strconv.Itoa(e.code) + " " + e.why }

func badRequest(why string) error { return &httpError{400, why} }

var errHeadTooLarge = &httpError{431, "request header too large"}

// serveH1 serves a client connection until it closes, errs, or the listener shuts down.
func (l *listener) serveH1(c *clientConn) {
	h := &h1conn{l: l, c: c, br: bufio.NewReaderSize(c, h1BufSize), bw: bufio.NewWriterSize(c, h1BufSize)}
	h.ip = []byte(clientIP(c.RemoteAddr().String()))
	if !l.trackH1(h, true) {
		c.Close()
		return
	}
	handedOff := false
	defer func() {
		l.trackH1(h, false)
		if !handedOff {
			c.Close()
		}
	}()
	now := time.Now()
	for {
		idle := l.state.Load().cfg.Timeouts.Idle.D()
		h.readBy(now.Add(idle), idle)
		if _, err := h.br.Peek(1); err != nil {
			return
		}
		h.active.Store(true)
		if l.closing.Load() {
			return
		}
		// The config may have changed while the connection waited: take the current one.
		st := l.state.Load()
		now = time.Now()
		if buffered, _ := h.br.Peek(h.br.Buffered()); !bytes.Contains(buffered, []byte("\r\n\r\n")) {
			// From the first byte on, the whole head must arrive within the read-header timeout,
			// however slowly it trickles: this is what cuts slowloris clients off.
			h.readBy(now.Add(st.cfg.Timeouts.ReadHeader.D()), 0)
		}
		err := h.readRequest(st)
		if h.req.h2Preface && err == nil {
			handedOff = l.handOffH2(c, h)
			return
		}
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				l.badRequest(c.RemoteAddr().String(), he.Error())
				h.writeError(he.code, true)
				l.stats.observe(Class4xx, 0)
			}
			return
		}
		if !h.proxy(st, now) {
			return
		}
		h.active.Store(false)
		if l.closing.Load() {
			return
		}
	}
}

// readBy sets the client connection's read deadline to want; with slack, a deadline already within the
// last quarter of slack before want is kept, which spares a timer update on most requests.
func (h *h1conn) readBy(want time.Time, slack time.Duration) {
	if !nearDeadline(h.readDL, want, slack) {
		h.c.SetReadDeadline(want)
		h.readDL = want
	}
}

// writeBy is readBy for writes.
func (h *h1conn) writeBy(want time.Time, slack time.Duration) {
	if !nearDeadline(h.writeDL, want, slack) {
		h.c.SetWriteDeadline(want)
		h.writeDL = want
	}
}

// nearDeadline reports whether cur is no later than want and at most a quarter of slack earlier.
func nearDeadline(cur, want time.Time, slack time.Duration) bool {
	return !cur.After(want) && cur.After(want.Add(-slack/4))
}

// handOffH2 gives a connection that opened with the HTTP/2 preface to net/http's server, replaying what
// was read of it.
func (l *listener) handOffH2(c *clientConn, h *h1conn) bool {
	buffered, _ := h.br.Peek(h.br.Buffered())
	replay := append(append([]byte(nil), h.req.raw...), buffered...)
	rc := &replayConn{clientConn: c, pending: replay}
	select {
	case l.queue.ch <- rc:
		return true
	case <-l.queue.done:
		return false
	}
}

// replayConn returns already-read bytes before reading on.
type replayConn struct {
	*clientConn
	pending []byte
}

func (c *replayConn) Read(p []byte) (int, error) {
	if len(c.pending) > 0 {
		n := copy(p, c.pending)
		c.pending = c.pending[n:]
		return n, nil
	}
	return c.clientConn.Read(p)
}

// trackH1 registers or forgets a connection for graceful shutdown; it refuses new ones once closing.
func (l *listener) trackH1(h *h1conn, add bool) bool {
	l.h1mu.Lock()
	defer l.h1mu.Unlock()
	if add {
		if l.closing.Load() {
			return false
		}
		if l.h1conns == nil {
			l.h1conns = map[*h1conn]struct{}{}
		}
		l.h1conns[h] = struct{}{}
		return true
	}
	delete(l.h1conns, h)
	return true
}

// shutdownH1 closes idle connections at once and waits up to the deadline for busy ones to finish their
// request (they close themselves after it), then closes what is left.
func (l *listener) shutdownH1(deadline time.Time) {
	l.closing.Store(true)
	for {
		l.h1mu.Lock()
		busy := 0
		for h := range l.h1conns {
			if h.active.Load() {
				busy++
			} else {
				h.c.Close()
			}
		}
		l.h1mu.Unlock()
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			l.h1mu.Lock()
			for h := range l.h1conns {
				h.c.Close()
			}
			l.h1mu.Unlock()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// readRequest reads and checks one request head.
func (h *h1conn) readRequest(st *listenerState) error {
	r := &h.req
	r.reset()
	limit := st.cfg.Limits.MaxHeaderBytes
	line, err := h.readLine(limit)
	if err != nil {
		return err
	}
	if len(line.in(r.raw)) == 0 {
		// One empty line before a request is tolerated (RFC 9112 section 2.2).
		r.raw = r.raw[:0]
		if line, err = h.readLine(limit); err != nil {
			return err
		}
	}
	if err := r.parseRequestLine(line); err != nil {
		return err
	}
	if r.h2Preface {
		return nil
	}
	for {
		line, err := h.readLine(limit)
		if err != nil {
			return err
		}
		if line.start == line.end {
			break
		}
		if len(r.hdrs) >= st.maxHeaders {
			return &httpError{431, "too many header fields"}
		}
		if err := r.parseHeader(line, st.routes); err != nil {
			return err
		}
	}
	return r.check(st)
}

// readLine appends the next line to raw and returns its span without the line ending. Lines longer than
// the read buffer are assembled; the whole head may not exceed limit bytes.
func (h *h1conn) readLine(limit int) (span, error) {
	start := len(h.req.raw)
	s, err := readLineInto(h.br, &h.req.raw, limit, errHeadTooLarge)
	if err == io.EOF && len(h.req.raw) > start {
		return span{}, badRequest("truncated request head")
	}
	return s, err
}

func (r *reqHead) parseRequestLine(s span) error {
	line := s.in(r.raw)
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1+1 {
		return badRequest("malformed request line")
	}
	method, target, version := line[:sp1], line[sp1+1:sp2], line[sp2+1:]
	if !isToken(method) {
		return badRequest("malformed method")
	}
	for _, c := range target {
		if c <= ' ' || c == 0x7f {
			return badRequest("malformed request target")
		}
	}
	switch string(version) {
	case "HTTP/1.1":
		r.minor = 1
	case "HTTP/1.0":
		r.minor = 0
	case "HTTP/2.0":
		if string(method) == "PRI" && string(target) == "*" {
			r.h2Preface = true
			return nil
		}
		return &httpError{505, "HTTP version not supported"}
	default:
		if bytes.HasPrefix(version, []byte("HTTP/")) {
			return &httpError{505, "HTTP version not supported"}
		}
		return badRequest("malformed HTTP version")
	}
	r.method = span{s.start, s.start + sp1}
	r.target = span{s.start + sp1 + 1, s.start + sp2}
	return nil
}

// parseHeader checks one header line and notes what the proxy needs from it.
func (r *reqHead) parseHeader(s span, rt *routes) error {
	line := s.in(r.raw)
	if line[0] == ' ' || line[0] == '\t' {
		return badRequest("obsolete line folding")
	}
	colon, vs, ve, ok := splitField(line)
	if !ok {
		return badRequest("malformed header line")
	}
	value := line[vs:ve]
	if !validValue(value) {
		return badRequest("control character in header value")
	}
	name := line[:colon]
	h := hdrLine{name: span{s.start, s.start + colon}, line: s}
	valSpan := span{s.start + vs, s.start + ve}
	switch {
	case eqFold(name, "host"):
		r.hosts++
	case eqFold(name, "content-length"):
		if r.contentLength >= 0 {
			return badRequest("more than one Content-Length")
		}
		n, ok := parseLength(value)
		if !ok {
			return badRequest("malformed Content-Length")
		}
		r.contentLength = n
	case eqFold(name, "transfer-encoding"):
		if r.chunked || !eqFold(value, "chunked") {
			return &httpError{501, "unsupported Transfer-Encoding"}
		}
		r.chunked = true
	case eqFold(name, "connection"):
		for i := 0; i < len(value); {
			var a, b int
			a, b, i = commaToken(value, i)
			tok := value[a:b]
			switch {
			case len(tok) == 0:
			case eqFold(tok, "close"):
				r.close = true
			case eqFold(tok, "keep-alive"):
				r.keepAlive = true
			case eqFold(tok, "upgrade"):
				r.upgradeAsked = true
			default:
				r.connTokens = append(r.connTokens, span{s.start + vs + a, s.start + vs + b})
			}
		}
	case eqFold(name, "upgrade"):
		r.upgrade, r.hasUpgrade = valSpan, true
	case eqFold(name, "te"):
		r.teTrailers = r.teTrailers || bytes.Contains(bytes.ToLower(value), []byte("trailers"))
	case eqFold(name, "expect"):
		if !eqFold(value, "100-continue") {
			return &httpError{417, "unsupported Expect"}
		}
		r.expectContinue, h.drop = true, true
	case eqFold(name, "x-forwarded-for"):
		r.xff = append(r.xff, valSpan)
	case eqFold(name, "cookie"):
		if rt.cookie != "" {
			r.cookies = append(r.cookies, valSpan)
		}
	}
	if rt.hashHeader != "" && !r.hasHash && eqFold(name, rt.hashHeader) {
		r.hashValue, r.hasHash = valSpan, true
	}
	// The proxy writes the hop-by-hop fields its target connection needs itself (buildOut), and the
	// X-Forwarded ones.
	h.drop = h.drop || isHopHeader(name) || inFold(name, forwardedHeaders)
	r.hdrs = append(r.hdrs, h)
	return nil
}

// check validates the head as a whole.
func (r *reqHead) check(st *listenerState) error {
	switch {
	case r.minor == 1 && r.hosts == 0:
		return badRequest("missing Host header")
	case r.hosts > 1:
		return badRequest("more than one Host header")
	case r.chunked && r.contentLength >= 0:
		// Both framings at once is how requests are smuggled past proxies: refuse it.
		return badRequest("both Content-Length and Transfer-Encoding")
	case r.chunked && r.minor == 0:
		return badRequest("Transfer-Encoding in HTTP/1.0")
	case r.contentLength > st.maxBody:
		return &httpError{413, "request body too large"}
	}
	method := r.method.in(r.raw)
	target := r.target.in(r.raw)
	switch {
	case string(method) == "CONNECT":
		return &httpError{405, "CONNECT is not proxied"}
	case string(target) == "*":
		if string(method) != "OPTIONS" {
			return badRequest("* target outside OPTIONS")
		}
	case target[0] == '/':
	case hasPrefixFold(target, "http://") || hasPrefixFold(target, "https://"):
		r.absoluteForm()
	default:
		return badRequest("malformed request target")
	}
	// Headers named in Connection are hop-by-hop, except the ones that frame the message: dropping
	// those would desynchronize the target from the client.
	dropNamed(r.raw, r.hdrs, r.connTokens)
	return nil
}

// absoluteForm takes the authority out of an absolute-form target ("http://host/path"): the target
// keeps the path and query, and the authority, without any user info, replaces the Host header (RFC
// 9112 section 3.2.2), as net/http's request reader does. An empty authority leaves the Host header.
func (r *reqHead) absoluteForm() {
	auth := span{r.target.start + bytes.Index(r.target.in(r.raw), []byte("://")) + 3, 0}
	end := auth.start
	for end < r.target.end && r.raw[end] != '/' && r.raw[end] != '?' {
		end++
	}
	auth.end = end
	if at := bytes.LastIndexByte(auth.in(r.raw), '@'); at >= 0 {
		auth.start += at + 1
	}
	r.target.start = end // may be empty or start with "?": buildOut writes the "/" then
	if auth.start == auth.end {
		return
	}
	r.absHost, r.hasAbsHost = auth, true
	for i := range r.hdrs {
		if eqFold(r.hdrs[i].name.in(r.raw), "host") {
			r.hdrs[i].drop = true
		}
	}
}

// dropNamed marks the fields named by tokens (the names listed in a Connection header) as dropped,
// except the framing ones.
func dropNamed(raw []byte, hdrs []hdrLine, tokens []span) {
	for _, tok := range tokens {
		name := tok.in(raw)
		if isFramingHeader(name) {
			continue
		}
		for i := range hdrs {
			if bytes.EqualFold(hdrs[i].name.in(raw), name) {
				hdrs[i].drop = true
			}
		}
	}
}

// splitField splits a "name: value" field line at its colon and bounds its value, trimmed of spaces
// and tabs, by vs and ve; ok is false when the name is not a token.
func splitField(line []byte) (colon, vs, ve int, ok bool) {
	colon = bytes.IndexByte(line, ':')
	if colon <= 0 || !isToken(line[:colon]) {
		return 0, 0, 0, false
	}
	vs, ve = colon+1, len(line)
	for vs < ve && (line[vs] == ' ' || line[vs] == '\t') {
		vs++
	}
	for ve > vs && (line[ve-1] == ' ' || line[ve-1] == '\t') {
		ve--
	}
	return colon, vs, ve, true
}

// validValue reports whether a field value is free of control characters (tabs aside).
func validValue(value []byte) bool {
	for _, c := range value {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// buildOut writes the request head for targets into h.out.
func (h *h1conn) buildOut(tlsOn bool) {
	r := &h.req
	out := h.out[:0]
	out = append(out, r.method.in(r.raw)...)
	out = append(out, ' ')
	if t := r.target.in(r.raw); len(t) == 0 || t[0] == '?' {
		out = append(out, '/')
	}
	out = append(out, r.target.in(r.raw)...)
	out = append(out, " HTTP/1.1\r\n"...)
	if r.hasAbsHost {
		out = append(out, "Host: "...)
		out = append(out, r.absHost.in(r.raw)...)
		out = append(out, '\r', '\n')
	}
	for _, hl := range r.hdrs {
		if !hl.drop {
			out = append(out, hl.line.in(r.raw)...)
			out = append(out, '\r', '\n')
		}
	}
	out = append(out, "X-Forwarded-For: "...)
	for _, v := range r.xff {
		out = append(out, v.in(r.raw)...)
		out = append(out, ", "...)
	}
	out = append(out, h.ip...)
	if tlsOn {
		out = append(out, "\r\nX-Forwarded-Proto: https\r\n"...)
	} else {
		out = append(out, "\r\nX-Forwarded-Proto: http\r\n"...)
	}
	if r.teTrailers {
		out = append(out, "TE: trailers\r\n"...)
	}
	if r.upgradeAsked && r.hasUpgrade {
		out = append(out, "Connection: Upgrade\r\nUpgrade: "...)
		out = append(out, r.upgrade.in(r.raw)...)
		out = append(out, '\r', '\n')
	}
	if r.chunked {
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	}
	h.out = out
}

// pickKey extracts the sticky cookie and hash key of the request.
func (h *h1conn) pickKey(rt *routes) pickKey {
	r := &h.req
	var k pickKey
	if r.hasHash {
		k.key, k.hasKey = fnv1a(r.hashValue.in(r.raw)), true
	}
	for _, c := range r.cookies {
		if v, ok := cookieValue(c.in(r.raw), rt.cookie); ok {
			k.cookie = v
			break
		}
	}
	return k
}

// cookieValue finds name's value in a Cookie header ("a=1; b=2").
func cookieValue(header []byte, name string) (string, bool) {
	for len(header) > 0 {
		var pair []byte
		pair, header, _ = bytes.Cut(header, []byte(";"))
		pair = bytes.TrimSpace(pair)
		if k, v, ok := bytes.Cut(pair, []byte("=")); ok && string(k) == name {
			return string(bytes.Trim(v, `"`)), true
		}
	}
	return "", false
}

// writeError answers with a short plain-text error. With closing set it also tells the client the
// connection ends.
func (h *h1conn) writeError(code int, closing bool) {
	h.writeBy(time.Now().Add(5*time.Second), 0)
	h.bw.Write(errorResponse(code, closing))
	h.bw.Flush()
}

var errorResponses sync.Map // code<<1 | closing -> []byte

func errorResponse(code int, closing bool) []byte {
	key := code << 1
	if closing {
		key |= 1
	}
	if b, ok := errorResponses.Load(key); ok {
		return b.([]byte)
	}
	text := http.StatusText(code)
	var b []byte
	b = append(b, "HTTP/1.1 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, text...)
	b = append(b, "\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: "...)
	b = strconv.AppendInt(b, int64(len(text)+1), 10)
	if closing {
		b = append(b, "\r\nConnection: close"...)
	}
	b = append(b, "\r\n\r\n"...)
	b = append(b, text...)
	b = append(b, '\n')
	errorResponses.Store(key, b)
	return b
}

// isToken reports whether b is an RFC 9110 token (method or header name).
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if int(c) >= len(tokenChars) || !tokenChars[c] {
			return false
		}
	}
	return true
}

var tokenChars = func() [128]bool {
	var t [128]bool
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range "!#$%&'*+-.^_`|~" {
		t[c] = true
	}
	return t
}()

// commaToken returns the bounds of the element of a comma-separated header value that starts at
// i, trimmed of spaces and tabs, and where the next element starts.
func commaToken(value []byte, i int) (a, b, next int) {
	a, b = i, i
	for b < len(value) && value[b] != ',' {
		b++
	}
	next = b + 1
	for a < b && (value[a] == ' ' || value[a] == '\t') {
		a++
	}
	for b > a && (value[b-1] == ' ' || value[b-1] == '\t') {
		b--
	}
	return a, b, next
}

// eqFold compares ASCII case-insensitively without allocating.
func eqFold[T string | []byte](b T, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if c == d {
			continue
		}
		if lc := c | 0x20; lc < 'a' || lc > 'z' || lc != d|0x20 {
			return false
		}
	}
	return true
}

func hasPrefixFold(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && eqFold(b[:len(prefix)], prefix)
}

// parseLength parses a Content-Length: decimal digits only, no sign, no overflow.
func parseLength(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}
