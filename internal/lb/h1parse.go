package lb

import (
	"bytes"
	"io"
	"strconv"
)

// This file is the fast engine's request reader: it parses a client's request head strictly (RFC 9112)
// into spans of one buffer reused from request to request.

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
	connection
	upgrade        span
	hasUpgrade     bool
	expectContinue bool
	teTrailers     bool
	xff            []span
	cookies        []span
	hashValue      span
	hasHash        bool
	host           span // the Host header's value
	tenantValue    span // the tenancy header's value
	hasTenant      bool
	absHost        span // the authority of an absolute-form target, forwarded as Host
	hasAbsHost     bool
	h2Preface      bool
}

func (r *reqHead) reset() {
	*r = reqHead{raw: r.raw[:0], hdrs: r.hdrs[:0], connection: connection{connTokens: r.connTokens[:0]}, xff: r.xff[:0], cookies: r.cookies[:0], contentLength: -1}
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
	inQuery := false
	for i, c := range target {
		inQuery = inQuery || c == '?'
		if c <= ' ' || c == 0x7f || (c == '%' && !inQuery && !(i+2 < len(target) && isHex(target[i+1]) && isHex(target[i+2]))) {
			// A malformed percent-encoding in the path is refused as net/http refuses it, so that both
			// engines and the targets behind them read the same path.
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
		if !validHost(value) {
			// A target routing by Host must see the one the proxy checked: net/http refuses these too.
			return badRequest("malformed Host header")
		}
		r.hosts++
		r.host = valSpan
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
		r.connection.parse(value, s.start+vs)
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
	if tr := rt.tenants; tr != nil && tr.key == TenantByHeader && !r.hasTenant && eqFold(name, tr.header) {
		r.tenantValue, r.hasTenant = valSpan, true
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
		if err := r.absoluteForm(); err != nil {
			return err
		}
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
func (r *reqHead) absoluteForm() error {
	auth := span{r.target.start + bytes.Index(r.target.in(r.raw), []byte("://")) + 3, 0}
	end := auth.start
	for end < r.target.end && r.raw[end] != '/' && r.raw[end] != '?' {
		end++
	}
	auth.end = end
	if at := bytes.LastIndexByte(auth.in(r.raw), '@'); at >= 0 {
		if !validUserinfo(r.raw[auth.start : auth.start+at]) {
			return badRequest("malformed request target")
		}
		auth.start += at + 1
	}
	if !validAuthority(auth.in(r.raw)) {
		return badRequest("malformed request target")
	}
	r.target.start = end // may be empty or start with "?": buildOut writes the "/" then
	if auth.start == auth.end {
		return nil
	}
	r.absHost, r.hasAbsHost = auth, true
	for i := range r.hdrs {
		if eqFold(r.hdrs[i].name.in(r.raw), "host") {
			r.hdrs[i].drop = true
		}
	}
	return nil
}

// connection is what Connection headers say, in a request or a response.
type connection struct {
	close        bool
	keepAlive    bool   // HTTP/1.0 "Connection: keep-alive"
	upgradeAsked bool   // "upgrade" among the tokens
	connTokens   []span // other header names listed: hop-by-hop too
}

// parse notes the tokens of one Connection header value, which starts at offset off of the raw head.
func (c *connection) parse(value []byte, off int) {
	for i := 0; i < len(value); {
		var a, b int
		a, b, i = commaToken(value, i)
		switch tok := value[a:b]; {
		case len(tok) == 0:
		case eqFold(tok, "close"):
			c.close = true
		case eqFold(tok, "keep-alive"):
			c.keepAlive = true
		case eqFold(tok, "upgrade"):
			c.upgradeAsked = true
		default:
			c.connTokens = append(c.connTokens, span{off + a, off + b})
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

var tokenChars = asciiSet("!#$%&'*+-.^_`|~")

// asciiSet is a lookup table of the ASCII letters, digits and the bytes of extra.
func asciiSet(extra string) [128]bool {
	var t [128]bool
	for c := '0'; c <= '9'; c++ {
		t[c] = true
	}
	for c := 'a'; c <= 'z'; c++ {
		t[c], t[c-'a'+'A'] = true, true
	}
	for _, c := range extra {
		t[c] = true
	}
	return t
}

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

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// validHost reports whether a Host value holds only bytes that may appear in a URI host and port (RFC
// 3986 section 3.2.2), as net/http checks it (golang.org/x/net/http/httpguts.ValidHostHeader).
func validHost(h []byte) bool {
	for _, c := range h {
		if int(c) >= len(hostChars) || !hostChars[c] {
			return false
		}
	}
	return true
}

var hostChars = asciiSet("!$%&'()*+,-.:;=[]_~")

// validAuthority reports whether an absolute-form target's authority is a host and optional decimal
// port: a name of host bytes, or an IPv6 literal in brackets. Percent-encoding has no use in a host a
// proxy forwards to, and net/http reads it its own way: it is refused.
func validAuthority(a []byte) bool {
	if !validHost(a) || bytes.IndexByte(a, '%') >= 0 {
		return false
	}
	host, port := a, []byte(nil)
	if len(a) > 0 && a[0] == '[' {
		end := bytes.IndexByte(a, ']')
		if end < 0 {
			return false
		}
		host, port = a[1:end], a[end+1:]
		if len(port) > 0 && port[0] != ':' {
			return false
		}
	} else if i := bytes.LastIndexByte(a, ':'); i >= 0 {
		host, port = a[:i], a[i:]
		if bytes.ContainsAny(host, ":") {
			return false
		}
	}
	if bytes.ContainsAny(host, "[]") {
		return false
	}
	for _, c := range port[min(1, len(port)):] {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validUserinfo reports whether the user info of an absolute-form target, which is not forwarded, holds
// only the bytes RFC 3986 allows there, as net/http checks it; percent-encoding is refused.
func validUserinfo(u []byte) bool {
	for _, c := range u {
		if c != '@' && (c == '%' || c == '[' || c == ']' || int(c) >= len(hostChars) || !hostChars[c]) {
			return false
		}
	}
	return true
}
