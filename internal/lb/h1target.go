package lb

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"strconv"
	"time"

	"herd.dev/herd/internal/h1"
)

// This file is the fast engine's side towards targets: its pool of kept-alive connections and its
// reader of response heads.

// maxResponseHead bounds a target's response head.
const maxResponseHead = 256 << 10

// bconn is a keep-alive connection to a target, owned by one request at a time.
type bconn struct {
	c         net.Conn
	br        *bufio.Reader
	bw        *bufio.Writer
	idleSince time.Time
	deadline  time.Time // set on c, for reads and writes
	peek      *peeker   // nil where the socket cannot be peeked at
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
	for {
		t.h1mu.Lock()
		n := len(t.h1idle)
		if n == 0 {
			t.h1mu.Unlock()
			break
		}
		c := t.h1idle[n-1]
		t.h1idle[n-1] = nil
		t.h1idle = t.h1idle[:n-1]
		t.h1mu.Unlock()
		idle := now.Sub(c.idleSince)
		// A connection that holds bytes nobody asked for, or that the target closed, is out of step:
		// the bytes would be taken for the answer to the next request. The peek is a system call: it
		// runs outside the lock.
		if idle > 90*time.Second || (fresh && idle > time.Second) || c.br.Buffered() > 0 || !c.peek.idleClean() {
			c.c.Close()
			continue
		}
		return c, true, nil
	}
	c, err := t.dial(context.Background(), connect)
	if err != nil {
		return nil, false, err
	}
	return &bconn{c: c, br: bufio.NewReaderSize(c, h1BufSize), bw: bufio.NewWriterSize(c, h1BufSize), peek: newPeeker(c)}, false, nil
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
	connection
	upgrade    span
	hasUpgrade bool
}

func (r *respHead) reset() {
	*r = respHead{raw: r.raw[:0], hdrs: r.hdrs[:0], connection: connection{connTokens: r.connTokens[:0]}, contentLength: -1}
}

// errBadResponse is a response head the proxy cannot relay safely.
var errBadResponse = errors.New("malformed response from target")

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
			if h1.EqFold(r.hdrs[i].name.in(r.raw), "content-length") {
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
	colon, vs, ve, ok := h1.SplitField(line)
	value := line[vs:ve]
	if !ok || !h1.ValidValue(value) {
		return errBadResponse
	}
	name := line[:colon]
	h := hdrLine{name: span{s.start, s.start + colon}, line: s}
	switch {
	case h1.EqFold(name, "content-length"):
		n, ok := h1.ParseLength(value)
		if !ok || (r.contentLength >= 0 && r.contentLength != n) {
			return errBadResponse
		}
		r.contentLength = n
	case h1.EqFold(name, "transfer-encoding"):
		if !h1.EqFold(value, "chunked") {
			return errBadResponse
		}
		r.chunked = true
	case h1.EqFold(name, "connection"):
		r.connection.parse(value, s.start+vs)
	case h1.EqFold(name, "upgrade"):
		r.upgrade, r.hasUpgrade = span{s.start + vs, s.start + ve}, true
	}
	// Trailers are relayed as they come, so their announcement stays.
	h.drop = isHopHeader(name) && !h1.EqFold(name, "trailer")
	r.hdrs = append(r.hdrs, h)
	return nil
}

// readLineInto appends the next line of br to *raw and returns its span without the line ending. When
// *raw would grow past limit bytes it returns tooLarge.
func readLineInto(br *bufio.Reader, raw *[]byte, limit int, tooLarge error) (span, error) {
	start, end, err := h1.ReadLine(br, raw, limit, tooLarge)
	return span{start, end}, err
}
