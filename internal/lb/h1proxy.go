package lb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// maxResponseHead bounds a target's response head.
const maxResponseHead = 256 << 10

// bconn is a keep-alive connection to a target, owned by one request at a time.
type bconn struct {
	c         net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	deadline  time.Time // set on c, for reads and writes
}

// extend moves the connection's deadline to now+d, unless it is already within the last quarter of d
// before that (see nearDeadline): the response timeout is then between 3/4 and all of d.
func (bc *bconn) extend(now time.Time, d time.Duration) {
	if want := now.Add(d); !nearDeadline(bc.deadline, want, d) {
		bc.c.SetDeadline(want)
		bc.deadline = want
	}
}

// getH1 takes an idle connection to t, or opens one. A connection idle for more than a second is not
// used for a non-idempotent request (fresh): the target may be closing it right now, and such a request
// cannot be retried.
func (t *target) getH1(connect time.Duration, fresh bool, now time.Time) (bc *bconn, reused bool, err error) {
	var stale []*bconn
	t.h1mu.Lock()
	for n := len(t.h1idle); n > 0; n-- {
		c := t.h1idle[n-1]
		t.h1idle[n-1] = nil
		t.h1idle = t.h1idle[:n-1]
		idle := now.Sub(c.idleSince)
		// A connection that holds bytes nobody asked for, or that the target closed, is out of step:
		// the bytes would be taken for the answer to the next request.
		if idle > 90*time.Second || (fresh && idle > time.Second) || c.br.Buffered() > 0 || !idleClean(c.c) {
			stale = append(stale, c)
			continue
		}
		bc = c
		break
	}
	t.h1mu.Unlock()
	for _, c := range stale {
		c.c.Close()
	}
	if bc != nil {
		return bc, true, nil
	}
	c, err := t.dial(context.Background(), connect)
	if err != nil {
		return nil, false, err
	}
	return &bconn{c: c, br: bufio.NewReaderSize(c, h1BufSize), bw: bufio.NewWriterSize(c, h1BufSize)}, false, nil
}

// putH1 returns a connection to the idle pool (the most recently used is taken first, so that surplus
// connections age out).
func (t *target) putH1(bc *bconn, now time.Time) {
	bc.idleSince = now
	t.h1mu.Lock()
	if len(t.h1idle) < 1024 && !t.draining.Load() {
		t.h1idle = append(t.h1idle, bc)
		bc = nil
	}
	t.h1mu.Unlock()
	if bc != nil {
		bc.c.Close()
	}
}

// flushH1 closes every idle connection of t.
func (t *target) flushH1() {
	t.h1mu.Lock()
	idle := t.h1idle
	t.h1idle = nil
	t.h1mu.Unlock()
	for _, bc := range idle {
		bc.c.Close()
	}
}

// respHead is a parsed response head from a target.
type respHead struct {
	raw           []byte
	minor         int
	code          int
	status        span // "200 OK"
	hdrs          []hdrLine
	contentLength int64
	chunked       bool
	close         bool
	keepAlive     bool
	upgrade       span
	hasUpgrade    bool
	connTokens    []span
}

func (r *respHead) reset() {
	*r = respHead{raw: r.raw[:0], hdrs: r.hdrs[:0], connTokens: r.connTokens[:0], contentLength: -1}
}

// errBadResponse is a response head the proxy cannot relay safely.
var errBadResponse = errors.New("malformed response from target")

// proxy forwards the request read into h.req through the proxy core and relays the answer. It reports
// whether the client connection may carry another request.
func (h *h1conn) proxy(st *listenerState, start time.Time) bool {
	r := &h.req
	h.buildOut(st.tlsOn)
	h.key = h.pickKey(st.routes)
	h.start, h.keep, h.bodyDone = start, false, false
	if r.expectContinue && r.hasBody() && r.minor == 1 {
		// The body is streamed to whichever target is chosen: ask for it now.
		h.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if h.bw.Flush() != nil {
			return false
		}
	}
	h.l.forward(context.Background(), st, h, &h.key, idempotentBytes(r.method.in(r.raw)), start)
	return h.keep
}

// fail answers with a proxy error. The connection can carry on only if the request was read whole.
func (h *h1conn) fail(code int) {
	h.keep = h.clientKeep() && (!h.req.hasBody() || h.bodyDone)
	h.writeError(code, !h.keep)
}

// clientKeep reports whether the client wants its connection kept after this request.
func (h *h1conn) clientKeep() bool {
	r := &h.req
	if r.minor == 0 {
		return r.keepAlive && !r.close
	}
	return !r.close
}

// attempt sends the request to t and relays its answer.
func (h *h1conn) attempt(st *listenerState, t *target) outcome {
	r := &h.req
	bc, reused, err := t.getH1(st.cfg.Timeouts.Connect.D(), !idempotentBytes(r.method.in(r.raw)), h.start)
	if err != nil {
		return outcome{kind: failConnect, err: err}
	}
	o := outcome{reused: reused}
	sent := time.Now()
	bc.extend(sent, st.cfg.Timeouts.Response.D())
	bc.bw.Write(h.out)
	if r.hosts == 0 && !r.hasAbsHost {
		bc.bw.WriteString("Host: ")
		bc.bw.WriteString(t.key.addr)
		bc.bw.WriteString("\r\n")
	}
	bc.bw.WriteString("\r\n")
	if r.hasBody() {
		o.bodySent = true
		h.readBy(sent.Add(st.cfg.Timeouts.Read.D()), 0)
		var rerr, werr error
		if r.chunked {
			rerr, werr = relayChunked(bc.bw, h.br, true, st.maxBody, nil)
		} else {
			rerr, werr = relayN(bc.bw, h.br, r.contentLength, nil)
		}
		h.bodyDone = rerr == nil && werr == nil
		if rerr != nil {
			// The client's body broke off or was malformed: the request is over.
			bc.c.Close()
			clientGone(t, h.start)
			var he *httpError
			if errors.As(rerr, &he) {
				h.l.badRequest(h.c.RemoteAddr().String(), he.Error())
				h.writeError(he.code, true)
			}
			return outcome{done: true}
		}
		if werr != nil {
			bc.c.Close()
			o.kind, o.err = failBroken, werr
			return o
		}
	}
	if err := bc.bw.Flush(); err != nil {
		bc.c.Close()
		o.kind, o.err = failBroken, err
		return o
	}
	return h.relay(st, t, bc, o)
}

// relay reads the target's answer and writes it to the client.
func (h *h1conn) relay(st *listenerState, t *target, bc *bconn, o outcome) outcome {
	r, resp := &h.req, &h.resp
	for {
		got := bc.br.Buffered()
		err := resp.read(bc.br)
		if err != nil {
			bc.c.Close()
			switch {
			case errors.Is(err, errBadResponse):
				// Something came back, just not HTTP: the target is at fault and the request not retried.
				o.kind = failBadResponse
			case isTimeout(err):
				o.kind = failTimeout
			case got > 0 || len(resp.raw) > 0:
				// The answer broke off after it began: retrying could repeat the request.
				o.kind = failOther
			default:
				o.kind = failBroken
			}
			o.err = err
			return o
		}
		if resp.code >= 100 && resp.code < 200 && resp.code != 101 {
			// Interim answers go to HTTP/1.1 clients as they come; 100 Continue was ours to send.
			if resp.code != 100 && r.minor == 1 {
				h.writeHead(resp, "", false, false, false)
				if h.bw.Flush() != nil {
					bc.c.Close()
					clientGone(t, h.start)
					return outcome{done: true}
				}
			}
			continue
		}
		break
	}
	if resp.code == 101 {
		return h.switchProtocols(st, t, bc)
	}

	head := string(r.method.in(r.raw)) == "HEAD"
	noBody := head || resp.code == 204 || resp.code == 304
	closeAfter := !h.clientKeep()
	clientChunked := false
	switch {
	case noBody:
	case resp.chunked:
		if r.minor == 1 {
			clientChunked = true
		} else {
			closeAfter = true // an HTTP/1.0 client gets the body until the connection closes
		}
	case resp.contentLength >= 0:
	default:
		closeAfter = true // the body ends when the target closes the connection
	}
	now := time.Now()
	h.writeBy(now.Add(st.cfg.Timeouts.Write.D()), st.cfg.Timeouts.Write.D())
	h.writeHead(resp, st.stickyCookie(t, h.key.cookie), clientChunked, closeAfter, !closeAfter && r.minor == 0)

	var rerr, werr error
	rd := &readDeadline{bc: bc, d: st.cfg.Timeouts.Response.D()}
	switch {
	case noBody:
	case resp.chunked:
		rerr, werr = relayChunked(h.bw, bc.br, clientChunked, -1, rd)
	case resp.contentLength >= 0:
		rerr, werr = relayN(h.bw, bc.br, resp.contentLength, rd)
	default:
		rerr, werr = relayAll(h.bw, bc.br, rd)
	}
	if werr == nil && rerr == nil {
		werr = h.bw.Flush()
	}
	// A target that sent more than its framing said is out of step: never reuse its connection. Bytes
	// that arrive later are caught by getH1.
	reusable := rerr == nil && werr == nil && !resp.close && (resp.minor == 1 || resp.keepAlive) &&
		(noBody || resp.chunked || resp.contentLength >= 0) && bc.br.Buffered() == 0
	if reusable {
		t.putH1(bc, now)
	} else {
		bc.c.Close()
	}
	switch {
	case rerr != nil:
		// The target broke off mid-body: the client connection is closed without a clean end of the
		// response, so the client sees the truncation.
		st.brokeOff(t, rerr, h.start)
	case werr != nil:
		clientGone(t, h.start)
	default:
		st.answered(t, resp.code, h.start)
		h.keep = !closeAfter
	}
	return outcome{done: true}
}

// writeHead writes the response head for the client: the target's status and end-to-end headers, the
// sticky cookie (if not empty), and the framing and connection headers of the client's own connection.
func (h *h1conn) writeHead(resp *respHead, cookie string, chunked, closing, keepAlive10 bool) {
	bw := h.bw
	if h.req.minor == 0 {
		h.writeStatus("HTTP/1.0 ", resp)
	} else {
		h.writeStatus("HTTP/1.1 ", resp)
	}
	if chunked {
		bw.WriteString("Transfer-Encoding: chunked\r\n")
	}
	if cookie != "" {
		bw.WriteString("Set-Cookie: ")
		bw.WriteString(cookie)
		bw.WriteString("\r\n")
	}
	switch {
	case closing:
		bw.WriteString("Connection: close\r\n")
	case keepAlive10:
		bw.WriteString("Connection: keep-alive\r\n")
	}
	bw.WriteString("\r\n")
}

// writeStatus writes the target's status line, under the given HTTP version, and the header fields
// that pass to the client.
func (h *h1conn) writeStatus(version string, resp *respHead) {
	h.bw.WriteString(version)
	h.bw.Write(resp.status.in(resp.raw))
	h.bw.WriteString("\r\n")
	for _, hl := range resp.hdrs {
		if !hl.drop {
			h.bw.Write(hl.line.in(resp.raw))
			h.bw.WriteString("\r\n")
		}
	}
}

// read parses a response head from br.
func (r *respHead) read(br *bufio.Reader) error {
	r.reset()
	line, err := readLineInto(br, &r.raw, maxResponseHead, errBadResponse)
	if err != nil {
		return err
	}
	b := line.in(r.raw)
	switch {
	case len(b) < 12 || b[8] != ' ':
		return errBadResponse
	case bytes.HasPrefix(b, []byte("HTTP/1.1")):
		r.minor = 1
	case bytes.HasPrefix(b, []byte("HTTP/1.0")):
		r.minor = 0
	default:
		return errBadResponse
	}
	code, err := strconv.Atoi(string(b[9:12]))
	if err != nil || code < 100 || code > 599 || (len(b) > 12 && b[12] != ' ') {
		return errBadResponse
	}
	r.code = code
	r.status = span{line.start + 9, line.end}
	for {
		line, err := readLineInto(br, &r.raw, maxResponseHead, errBadResponse)
		if err != nil {
			return err
		}
		if line.start == line.end {
			break
		}
		if err := r.parseHeader(line); err != nil {
			return err
		}
	}
	if r.chunked && r.contentLength >= 0 {
		// Transfer-Encoding wins (RFC 9112 section 6.3); the length must not reach the client.
		for i := range r.hdrs {
			if eqFold(r.hdrs[i].name.in(r.raw), "content-length") {
				r.hdrs[i].drop = true
			}
		}
		r.contentLength = -1
	}
	dropNamed(r.raw, r.hdrs, r.connTokens)
	return nil
}

func (r *respHead) parseHeader(s span) error {
	line := s.in(r.raw)
	colon, vs, ve, ok := splitField(line)
	value := line[vs:ve]
	if !ok || !validValue(value) {
		return errBadResponse
	}
	name := line[:colon]
	h := hdrLine{name: span{s.start, s.start + colon}, line: s}
	switch {
	case eqFold(name, "content-length"):
		n, ok := parseLength(value)
		if !ok || (r.contentLength >= 0 && r.contentLength != n) {
			return errBadResponse
		}
		r.contentLength = n
	case eqFold(name, "transfer-encoding"):
		if !eqFold(value, "chunked") {
			return errBadResponse
		}
		r.chunked = true
	case eqFold(name, "connection"):
		for i := 0; i < len(value); {
			var a, b int
			a, b, i = commaToken(value, i)
			switch tok := value[a:b]; {
			case len(tok) == 0, eqFold(tok, "upgrade"):
			case eqFold(tok, "close"):
				r.close = true
			case eqFold(tok, "keep-alive"):
				r.keepAlive = true
			default:
				r.connTokens = append(r.connTokens, span{s.start + vs + a, s.start + vs + b})
			}
		}
	case eqFold(name, "upgrade"):
		r.upgrade, r.hasUpgrade = span{s.start + vs, s.start + ve}, true
	}
	// Trailers are relayed as they come, so their announcement stays.
	h.drop = isHopHeader(name) && !eqFold(name, "trailer")
	r.hdrs = append(r.hdrs, h)
	return nil
}

// readLineInto appends the next line of br to *raw and returns its span without the line ending. When
// *raw would grow past limit bytes it returns tooLarge.
func readLineInto(br *bufio.Reader, raw *[]byte, limit int, tooLarge error) (span, error) {
	start := len(*raw)
	for {
		frag, err := br.ReadSlice('\n')
		if len(*raw)+len(frag) > limit {
			return span{}, tooLarge
		}
		*raw = append(*raw, frag...)
		if err == nil {
			break
		}
		if err != bufio.ErrBufferFull {
			return span{}, err
		}
	}
	end := len(*raw) - 1
	if end > start && (*raw)[end-1] == '\r' {
		end--
	}
	return span{start, end}, nil
}

// switchProtocols completes an upgrade (WebSocket and the like): bytes then flow both ways until either
// side closes.
func (h *h1conn) switchProtocols(st *listenerState, t *target, bc *bconn) outcome {
	r, resp := &h.req, &h.resp
	if !r.upgradeAsked || !r.hasUpgrade || !resp.hasUpgrade || !bytes.EqualFold(r.upgrade.in(r.raw), resp.upgrade.in(resp.raw)) {
		bc.c.Close()
		st.misbehaved(t, errors.New("target switched protocols without an agreed upgrade"), h.start)
		h.keep = h.clientKeep()
		h.writeError(http.StatusBadGateway, !h.keep)
		return outcome{done: true}
	}
	defer bc.c.Close()
	h.writeBy(time.Now().Add(st.cfg.Timeouts.Write.D()), 0)
	h.writeStatus("HTTP/1.1 ", resp)
	h.bw.WriteString("Connection: Upgrade\r\nUpgrade: ")
	h.bw.Write(resp.upgrade.in(resp.raw))
	h.bw.WriteString("\r\n\r\n")
	if h.bw.Flush() != nil {
		clientGone(t, h.start)
		return outcome{done: true}
	}
	st.switched(t, h.start)
	// The upgraded connection lives by its own rules: no request deadlines.
	h.c.SetDeadline(time.Time{})
	h.readDL, h.writeDL = time.Time{}, time.Time{}
	bc.c.SetDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.br.WriteTo(bc.c) // whatever the client sent after its request first, then the rest
		bc.c.Close()
	}()
	bc.br.WriteTo(h.c.Conn)
	h.c.Close()
	<-done
	return outcome{done: true}
}

// readDeadline extends a target connection's deadline while a body streams in, so the response timeout
// bounds the time without progress rather than the whole body.
type readDeadline struct {
	bc *bconn
	d  time.Duration
}

func (rd *readDeadline) refresh() {
	if rd != nil {
		rd.bc.extend(time.Now(), rd.d)
	}
}

// fill makes src hold at least one byte, flushing dst first so the other side sees what came so far
// before this side blocks. It returns the error of the side that failed.
func fill(dst *bufio.Writer, src *bufio.Reader, rd *readDeadline) (rerr, werr error) {
	if src.Buffered() > 0 {
		return nil, nil
	}
	if dst.Buffered() > 0 {
		if err := dst.Flush(); err != nil {
			return nil, err
		}
	}
	rd.refresh()
	_, err := src.Peek(1)
	return err, nil
}

// relayN copies exactly n bytes.
func relayN(dst *bufio.Writer, src *bufio.Reader, n int64, rd *readDeadline) (rerr, werr error) {
	for n > 0 {
		if rerr, werr = fill(dst, src, rd); rerr != nil || werr != nil {
			if rerr == io.EOF {
				rerr = io.ErrUnexpectedEOF
			}
			return rerr, werr
		}
		b, _ := src.Peek(int(min(int64(src.Buffered()), n)))
		if _, err := dst.Write(b); err != nil {
			return nil, err
		}
		src.Discard(len(b))
		n -= int64(len(b))
	}
	return nil, nil
}

// relayAll copies until src ends.
func relayAll(dst *bufio.Writer, src *bufio.Reader, rd *readDeadline) (rerr, werr error) {
	for {
		if rerr, werr = fill(dst, src, rd); werr != nil {
			return nil, werr
		}
		if rerr == io.EOF {
			return nil, nil
		}
		if rerr != nil {
			return rerr, nil
		}
		b, _ := src.Peek(src.Buffered())
		if _, err := dst.Write(b); err != nil {
			return nil, err
		}
		src.Discard(len(b))
	}
}

var errBadChunk = badRequest("malformed chunked body")

// relayChunked copies a chunked body, re-chunked when chunked is set (trailers included), else as plain
// data. limit (when not -1) bounds the data: a request body over it is answered 413.
func relayChunked(dst *bufio.Writer, src *bufio.Reader, chunked bool, limit int64, rd *readDeadline) (rerr, werr error) {
	var raw []byte
	var total int64
	for {
		if raw, rerr, werr = chunkLine(dst, src, rd); rerr != nil || werr != nil {
			return rerr, werr
		}
		line := bytes.TrimRight(raw, "\r\n")
		if i := bytes.IndexByte(line, ';'); i >= 0 {
			line = line[:i] // chunk extensions are dropped
		}
		line = bytes.TrimRight(line, " \t")
		size, ok := parseHex(line)
		if !ok {
			return errBadChunk, nil
		}
		if total += size; limit >= 0 && total > limit {
			return &httpError{413, "request body too large"}, nil
		}
		if size == 0 {
			if chunked {
				dst.WriteString("0\r\n")
			}
			// Trailer fields, then the final empty line.
			for {
				if raw, rerr, werr = chunkLine(dst, src, rd); rerr != nil || werr != nil {
					return rerr, werr
				}
				field := bytes.TrimRight(raw, "\r\n")
				if len(field) > 0 && !validField(field) {
					return errBadChunk, nil
				}
				if chunked {
					// Line endings are rewritten as CRLF: some servers wait for a CRLF CRLF that a
					// bare LF would never complete.
					dst.Write(field)
					if _, err := dst.WriteString("\r\n"); err != nil {
						return nil, err
					}
				}
				if len(field) == 0 {
					return nil, nil
				}
			}
		}
		if chunked {
			dst.WriteString(strconv.FormatInt(size, 16))
			dst.WriteString("\r\n")
		}
		if rerr, werr = relayN(dst, src, size, rd); rerr != nil || werr != nil {
			return rerr, werr
		}
		if rerr, werr = fill(dst, src, rd); rerr != nil || werr != nil {
			return eofUnexpected(rerr), werr
		}
		crlf, err := src.ReadSlice('\n')
		if err != nil || len(bytes.TrimRight(crlf, "\r\n")) != 0 || len(crlf) > 2 {
			return errBadChunk, nil
		}
		if chunked {
			if _, err := dst.WriteString("\r\n"); err != nil {
				return nil, err
			}
		}
	}
}

// chunkLine reads the next line of a chunked body (size or trailer field), line ending included.
func chunkLine(dst *bufio.Writer, src *bufio.Reader, rd *readDeadline) (line []byte, rerr, werr error) {
	if rerr, werr = fill(dst, src, rd); rerr != nil || werr != nil {
		return nil, eofUnexpected(rerr), werr
	}
	line, err := src.ReadSlice('\n')
	if err != nil {
		return nil, eofUnexpected(chunkErr(err)), nil
	}
	return line, nil, nil
}

// validField reports whether line is a well-formed "name: value" field line.
func validField(line []byte) bool {
	_, vs, ve, ok := splitField(line)
	return ok && validValue(line[vs:ve])
}

func chunkErr(err error) error {
	if err == bufio.ErrBufferFull {
		return errBadChunk
	}
	return err
}

func eofUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseHex parses a chunk size: 1 to 15 hex digits.
func parseHex(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n<<4 | int64(c-'0')
		case c >= 'a' && c <= 'f':
			n = n<<4 | int64(c-'a'+10)
		case c >= 'A' && c <= 'F':
			n = n<<4 | int64(c-'A'+10)
		default:
			return 0, false
		}
	}
	return n, true
}

func idempotentBytes(method []byte) bool {
	switch string(method) { // the conversion does not allocate in a switch
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}
