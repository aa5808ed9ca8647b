package lb

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"herd.dev/herd/internal/busypoll"
	"herd.dev/herd/internal/fnvmix"
	"herd.dev/herd/internal/h1"
)

// This file is herd's own HTTP/1.x server side, used for every cleartext HTTP/1.x client connection of
// an HTTP listener whose targets speak HTTP/1.1: it is the hot path, and net/http's general-purpose
// server costs more than twice its CPU per proxied request (a goroutine and a context per request,
// background reads, header maps). It parses strictly (RFC 9112) and refuses what is ambiguous, such as
// both Content-Length and Transfer-Encoding. HTTP/2 (h2c prior knowledge) is handed to net/http's
// server at the first request line. On TLS listeners it serves the connections whose client chose
// HTTP/1.1 (or nothing) by ALPN, over the TLS session (h1tls.go); those that chose h2, and h2c
// targets, go to net/http (proxy.go).

const h1BufSize = 4096

// A client connection's buffers are pooled: a connection that carries one request (every request a
// new TLS handshake, "Connection: close") would otherwise allocate 8 KiB for them, a fifth of what
// its whole TLS session allocates, and the collector's work grows with it.
var (
	h1Readers = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, h1BufSize) }}
	h1Writers = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, h1BufSize) }}
)

// newH1conn returns a connection's state with pooled buffers over conn; release returns them.
func newH1conn(l *listener, c *clientConn, conn net.Conn) *h1conn {
	h := &h1conn{l: l, c: c, conn: conn, br: h1Readers.Get().(*bufio.Reader), bw: h1Writers.Get().(*bufio.Writer)}
	h.br.Reset(conn)
	h.bw.Reset(conn)
	return h
}

// release gives h's buffers back to the pools once nothing reads or writes them any more: the
// connection is closed or handed off with its buffered bytes copied.
func (h *h1conn) release() {
	h.br.Reset(nil)
	h.bw.Reset(nil)
	h1Readers.Put(h.br)
	h1Writers.Put(h.bw)
	h.br, h.bw = nil, nil
}

// h1conn is one client connection served by the HTTP/1.x engine.
type h1conn struct {
	l      *listener
	c      *clientConn // the accepted connection: its address, RTT samples and open count
	conn   net.Conn    // what requests are read from and answers written to: c, or a TLS session over it
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

// serveH1 serves a client connection over conn (c itself, or the TLS session over it) until it
// closes, errs, or the listener shuts down.
func (l *listener) serveH1(c *clientConn, conn net.Conn) {
	h := newH1conn(l, c, conn)
	defer h.release()
	h.ip = []byte(clientIP(c.RemoteAddr().String()))
	if !l.trackH1(h, true) {
		c.Close()
		return
	}
	handedOff := false
	defer func() {
		l.trackH1(h, false)
		if !handedOff {
			conn.Close()
		}
	}()
	now := time.Now()
	for {
		idle := l.state.Load().cfg.Timeouts.Idle.D()
		h.readBy(now.Add(idle), idle)
		if _, err := h.br.Peek(1); err != nil {
			return
		}
		busypoll.Activity()
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
			// Prior knowledge is for cleartext: over TLS a client asks for h2 by ALPN, and one
			// that sends the preface after choosing HTTP/1.1 is not served.
			handedOff = conn == net.Conn(c) && l.handOffH2(c, h)
			return
		}
		if err != nil {
			var he *httpError
			if errors.As(err, &he) {
				l.badRequest(c.RemoteAddr().String(), he.Error())
				h.writeError(he.Code, true)
				l.stats.observe(Class4xx, 0)
			}
			return
		}
		keep := h.proxy(st, now)
		c.sampleRTT(now)
		if !keep {
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
		h.conn.SetReadDeadline(want)
		h.readDL = want
	}
}

// writeBy is readBy for writes.
func (h *h1conn) writeBy(want time.Time, slack time.Duration) {
	if !nearDeadline(h.writeDL, want, slack) {
		h.conn.SetWriteDeadline(want)
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
	return l.queue.Put(&h1.ReplayConn{Conn: c, Pending: replay})
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
	if r.UpgradeAsked && r.hasUpgrade {
		out = append(out, "Connection: Upgrade\r\nUpgrade: "...)
		out = append(out, r.upgrade.in(r.raw)...)
		out = append(out, '\r', '\n')
	}
	if r.Chunked {
		out = append(out, "Transfer-Encoding: chunked\r\n"...)
	}
	h.out = out
}

// pickKey extracts the sticky cookie and hash key of the request.
func (h *h1conn) pickKey(rt *routes) pickKey {
	r := &h.req
	var k pickKey
	if r.hasHash {
		k.key, k.hasKey = fnvmix.FNV1a(r.hashValue.in(r.raw)), true
	}
	for _, c := range r.cookies {
		if v, ok := cookieValue(c.in(r.raw), rt.cookie); ok {
			k.cookie = v
			break
		}
	}
	if tr := rt.tenants; tr != nil {
		if tr.key == TenantByHeader {
			if r.hasTenant {
				k.tenant = r.tenantValue.in(r.raw)
			}
		} else {
			k.tenant = tenantOf(tr.key, r.host.in(r.raw), r.target.in(r.raw))
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
