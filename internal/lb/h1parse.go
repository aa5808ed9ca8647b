package lb

import (
	"bytes"
	"io"

	"herd.dev/herd/internal/h1"
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
	h1.Framing
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
	*r = reqHead{raw: r.raw[:0], hdrs: r.hdrs[:0], connection: connection{connTokens: r.connTokens[:0]}, xff: r.xff[:0], cookies: r.cookies[:0], Framing: h1.Framing{ContentLength: -1}}
}

// httpError is a request the engine refuses, with the status to answer.
type httpError = h1.Error

func badRequest(why string) error { return h1.BadRequest(why) }

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
			return &httpError{Code: 431, Why: "too many header fields"}
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
	s, err := readLineInto(h.br, &h.req.raw, limit, h1.ErrHeadTooLarge)
	if err == io.EOF && len(h.req.raw) > start {
		return span{}, badRequest("truncated request head")
	}
	return s, err
}

func (r *reqHead) parseRequestLine(s span) error {
	rl, err := h1.ParseRequestLine(s.in(r.raw))
	if err != nil {
		return err
	}
	r.minor, r.h2Preface = rl.Minor, rl.H2Preface
	r.method = span{s.start, s.start + rl.MethodEnd}
	r.target = span{s.start + rl.TargetStart, s.start + rl.TargetEnd}
	return nil
}

// parseHeader checks one header line and notes what the proxy needs from it.
func (r *reqHead) parseHeader(s span, rt *routes) error {
	line := s.in(r.raw)
	colon, vs, ve, err := h1.CheckField(line)
	if err != nil {
		return err
	}
	value, name := line[vs:ve], line[:colon]
	h := hdrLine{name: span{s.start, s.start + colon}, line: s}
	valSpan := span{s.start + vs, s.start + ve}
	framing, err := r.Framing.Field(name, value)
	if err != nil {
		return err
	}
	switch {
	case framing:
	case h1.EqFold(name, "host"):
		if err := h1.CheckHost(value); err != nil {
			return err
		}
		r.Hosts++
		r.host = valSpan
	case h1.EqFold(name, "connection"):
		r.connection.parse(value, s.start+vs)
	case h1.EqFold(name, "upgrade"):
		r.upgrade, r.hasUpgrade = valSpan, true
	case h1.EqFold(name, "te"):
		r.teTrailers = r.teTrailers || bytes.Contains(bytes.ToLower(value), []byte("trailers"))
	case h1.EqFold(name, "expect"):
		if !h1.EqFold(value, "100-continue") {
			return &httpError{Code: 417, Why: "unsupported Expect"}
		}
		r.expectContinue, h.drop = true, true
	case h1.EqFold(name, "x-forwarded-for"):
		r.xff = append(r.xff, valSpan)
	}
	r.noteRouting(name, valSpan, rt)
	// The proxy writes the hop-by-hop fields its target connection needs itself (buildOut), and the
	// X-Forwarded ones.
	h.drop = h.drop || isHopHeader(name) || inFold(name, forwardedHeaders)
	r.hdrs = append(r.hdrs, h)
	return nil
}

// noteRouting notes a header field that rt picks targets by: the sticky cookie, the tenant's
// header, the hashed header.
func (r *reqHead) noteRouting(name []byte, value span, rt *routes) {
	if rt.cookie != "" && h1.EqFold(name, "cookie") {
		r.cookies = append(r.cookies, value)
	}
	if tr := rt.tenants; tr != nil && tr.key == TenantByHeader && !r.hasTenant && h1.EqFold(name, tr.header) {
		r.tenantValue, r.hasTenant = value, true
	}
	if rt.hashHeader != "" && !r.hasHash && h1.EqFold(name, rt.hashHeader) {
		r.hashValue, r.hasHash = value, true
	}
}

// check validates the head as a whole.
func (r *reqHead) check(st *listenerState) error {
	r.Framing.Minor = r.minor
	if err := r.Framing.Check(st.maxBody); err != nil {
		return err
	}
	method := r.method.in(r.raw)
	target := r.target.in(r.raw)
	switch {
	case string(method) == "CONNECT":
		return &httpError{Code: 405, Why: "CONNECT is not proxied"}
	case string(target) == "*":
		if string(method) != "OPTIONS" {
			return badRequest("* target outside OPTIONS")
		}
	case target[0] == '/':
	case h1.HasPrefixFold(target, "http://") || h1.HasPrefixFold(target, "https://"):
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
		if !h1.ValidUserinfo(r.raw[auth.start : auth.start+at]) {
			return badRequest("malformed request target")
		}
		auth.start += at + 1
	}
	if !h1.ValidAuthority(auth.in(r.raw)) {
		return badRequest("malformed request target")
	}
	r.target.start = end // may be empty or start with "?": buildOut writes the "/" then
	if auth.start == auth.end {
		return nil
	}
	r.absHost, r.hasAbsHost = auth, true
	for i := range r.hdrs {
		if h1.EqFold(r.hdrs[i].name.in(r.raw), "host") {
			r.hdrs[i].drop = true
		}
	}
	return nil
}

// connection is what Connection headers say, in a request or a response, with the names of the
// other fields they make hop-by-hop.
type connection struct {
	h1.Connection
	connTokens []span // other header names listed: hop-by-hop too
}

// parse notes the tokens of one Connection header value, which starts at offset off of the raw head.
func (c *connection) parse(value []byte, off int) {
	c.Connection.Parse(value, func(a, b int) { c.connTokens = append(c.connTokens, span{off + a, off + b}) })
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
