package edge

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"herd.dev/herd/internal/h1"
)

// h1BufSize is the read buffer of a connection: a typical request head fits, and pipelined ones
// are read a buffer at a time.
const h1BufSize = 4096

// h1conn is one client connection served by the engine.
type h1conn struct {
	s      *Server
	raw    net.Conn // the accepted connection
	conn   net.Conn // what requests are read from and answers written to: raw, or a TLS session over it
	br     *bufio.Reader
	out    outbuf
	active atomic.Bool
	ctx    context.Context // the requests' context: cancelled when the connection ends
	readDL time.Time
	req    reqHead
}

// reqHead is a request head as the engine reads it: what the hit path needs, and whether the
// request is one to hand over.
type reqHead struct {
	raw            []byte
	method, target []byte
	host           []byte
	h1.Framing
	h1.Connection
	h2Preface bool
	// handOver: the request is one for net/http's server (a body, another method, an upgrade).
	handOver bool
	// plain: nothing in the head changes how a fresh stored response is served.
	plain bool
	// acceptEncoding: the head has an Accept-Encoding field, which selects a coding where a
	// behavior compresses.
	acceptEncoding bool
}

// serveH1 serves a client connection over conn (raw itself, or a TLS session over it) until it
// closes, errs, or the server shuts down.
func (s *Server) serveH1(raw, conn net.Conn) {
	ctx, cancel := context.WithCancel(context.Background())
	h := &h1conn{s: s, raw: raw, conn: conn, br: bufio.NewReaderSize(conn, h1BufSize), ctx: ctx}
	h.out.init(conn, conn == raw)
	if !s.track(h, true) {
		cancel()
		conn.Close()
		return
	}
	handedOver := false
	defer func() {
		s.track(h, false)
		cancel()
		if !handedOver {
			conn.Close()
		}
	}()
	for {
		h.readBy(time.Now().Add(s.opts.IdleTimeout), s.opts.IdleTimeout)
		if _, err := h.br.Peek(1); err != nil {
			return
		}
		h.active.Store(true)
		if s.closing.Load() {
			return
		}
		if buffered, _ := h.br.Peek(h.br.Buffered()); !bytes.Contains(buffered, []byte("\r\n\r\n")) {
			// From the first byte on, the whole head must arrive within the read-header timeout,
			// however slowly it trickles: this is what cuts slowloris clients off.
			h.readBy(time.Now().Add(s.opts.ReadHeaderTimeout), 0)
		}
		err := h.readRequest()
		if err == nil && (h.req.h2Preface || h.req.handOver) {
			// Prior knowledge is for cleartext: over TLS a client asks for h2 by ALPN.
			if h.req.h2Preface && conn != raw {
				return
			}
			if h.out.flush() != nil {
				return
			}
			handedOver = true
			buffered, _ := h.br.Peek(h.br.Buffered())
			s.handOver(&h1.ReplayConn{Conn: conn, Pending: append(h.req.raw, buffered...)})
			return
		}
		if err != nil {
			if he, ok := errors.AsType[*h1.Error](err); ok {
				s.log.Debug("request refused", "remote", raw.RemoteAddr().String(), "why", he.Why)
				h.out.write(errorResponse(he.Code))
				h.out.flush()
			}
			return
		}
		keep := h.serve()
		if !keep {
			h.out.flush()
			return
		}
		if h.br.Buffered() == 0 {
			// Answers to pipelined requests go out together, once no more requests are waiting.
			if h.out.flush() != nil {
				return
			}
		}
		h.active.Store(false)
		if s.closing.Load() {
			h.out.flush()
			return
		}
	}
}

// readBy sets the connection's read deadline to want; with slack, a deadline already within the
// last quarter of slack before want is kept, which spares a timer update on most requests.
func (h *h1conn) readBy(want time.Time, slack time.Duration) {
	if h.readDL.After(want) || !h.readDL.After(want.Add(-slack/4)) {
		h.conn.SetReadDeadline(want)
		h.readDL = want
	}
}

// readRequest reads and checks one request head with the load balancer's rules.
func (h *h1conn) readRequest() error {
	r := &h.req
	*r = reqHead{raw: r.raw[:0], Framing: h1.Framing{ContentLength: -1}, plain: true}
	limit := h.s.opts.MaxHeaderBytes
	start, end, err := h.readLine(limit)
	if err != nil {
		return err
	}
	if start == end {
		// One empty line before a request is tolerated (RFC 9112 section 2.2).
		r.raw = r.raw[:0]
		if start, end, err = h.readLine(limit); err != nil {
			return err
		}
	}
	rl, err := h1.ParseRequestLine(r.raw[start:end])
	if err != nil {
		return err
	}
	if r.h2Preface = rl.H2Preface; r.h2Preface {
		return nil
	}
	r.Minor = rl.Minor
	lineEnd := end
	fields := 0
	for {
		start, end, err := h.readLine(limit)
		if err != nil {
			return err
		}
		if start == end {
			break
		}
		if fields++; fields > h.s.opts.MaxHeaders {
			return &h1.Error{Code: 431, Why: "too many header fields"}
		}
		if err := r.field(r.raw[start:end]); err != nil {
			return err
		}
	}
	if err := r.Check(maxRequestBody); err != nil {
		return err
	}
	// The spans are taken once the head is whole: raw may have moved as it grew.
	line := r.raw[:lineEnd]
	r.method, r.target = line[:rl.MethodEnd], line[rl.TargetStart:rl.TargetEnd]
	if string(r.method) == "CONNECT" {
		return &h1.Error{Code: 405, Why: "CONNECT is not proxied"}
	}
	if !(string(r.method) == "GET" || string(r.method) == "HEAD") || r.HasBody() || r.target[0] != '/' {
		r.handOver = true
	}
	return nil
}

// maxRequestBody bounds a request's declared body, as the load balancer's listeners do by default.
const maxRequestBody = 32 << 20

func (h *h1conn) readLine(limit int) (start, end int, err error) {
	n := len(h.req.raw)
	start, end, err = h1.ReadLine(h.br, &h.req.raw, limit, h1.ErrHeadTooLarge)
	if err == io.EOF && len(h.req.raw) > n {
		return 0, 0, h1.BadRequest("truncated request head")
	}
	return start, end, err
}

// field checks one field line and notes what the engine needs from it. Spans into raw are taken
// later (host is re-found by hostOf), since raw may grow and move.
func (r *reqHead) field(line []byte) error {
	colon, vs, ve, err := h1.CheckField(line)
	if err != nil {
		return err
	}
	name, value := line[:colon], line[vs:ve]
	framing, err := r.Field(name, value)
	if err != nil || framing {
		return err
	}
	switch {
	case h1.EqFold(name, "host"):
		if err := h1.CheckHost(value); err != nil {
			return err
		}
		r.Hosts++
	case h1.EqFold(name, "connection"):
		r.Connection.Parse(value, nil)
		r.handOver = r.handOver || r.UpgradeAsked
	case h1.EqFold(name, "upgrade"), h1.EqFold(name, "expect"):
		r.handOver = true
	case h1.EqFold(name, "accept-encoding"):
		r.acceptEncoding = true
	case h1.EqFold(name, "cache-control"), h1.EqFold(name, "pragma"),
		h1.EqFold(name, "if-none-match"), h1.EqFold(name, "if-modified-since"), h1.EqFold(name, "if-match"),
		h1.EqFold(name, "if-unmodified-since"), h1.EqFold(name, "if-range"), h1.EqFold(name, "range"):
		r.plain = false
	}
	return nil
}

// hostOf finds the Host field's value in a checked head; nil when there is none.
func (r *reqHead) hostOf() []byte {
	head := r.raw
	for {
		i := bytes.IndexByte(head, '\n')
		if i < 0 {
			return nil
		}
		head = head[i+1:]
		end := bytes.IndexByte(head, '\n')
		if end <= 0 {
			return nil
		}
		line := bytes.TrimSuffix(head[:end], []byte("\r"))
		if colon, vs, ve, ok := h1.SplitField(line); ok && h1.EqFold(line[:colon], "host") {
			return line[vs:ve]
		}
	}
}

// keep reports whether the client wants its connection kept after this request.
func (r *reqHead) keep() bool {
	if r.Minor == 0 {
		return r.KeepAlive && !r.Close
	}
	return !r.Close
}

// serve answers one GET or HEAD: from a fresh stored object when it can, else through the handler.
// It reports whether the connection may carry another request.
func (h *h1conn) serve() bool {
	r := &h.req
	r.host = r.hostOf()
	if r.plain && h.s.e.serveHit(h) {
		return r.keep()
	}
	return h.serveHandler()
}

// errorResponse is a short plain-text answer to a refused request; the connection closes after it.
func errorResponse(code int) []byte {
	text := http.StatusText(code)
	return []byte("HTTP/1.1 " + itoa(code) + " " + text + "\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"X-Content-Type-Options: nosniff\r\nConnection: close\r\nContent-Length: " + itoa(len(text)+1) + "\r\n\r\n" + text + "\n")
}
