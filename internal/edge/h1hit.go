package edge

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// This file answers a fresh hit on the engine's connections: the status line, the object's Age (and
// Date when the origin sent none), then its stored fields and body, one slice, in one write.

// serveHit answers the request in h.req, a GET or HEAD whose head has nothing that changes how a
// stored response is served, from a fresh stored object, as ServeHTTP would. It reports false, having
// written nothing, when the request is not such a hit.
func (e *Edge) serveHit(h *h1conn) bool {
	r := &h.req
	path, query, ok := plainTarget(r.target)
	if !ok {
		return false
	}
	b := e.cfg.Load().behavior(path)
	if b == nil || !b.allows(string(r.method)) || len(b.Policy.Headers) > 0 || len(b.Policy.Cookies) > 0 ||
		(b.Policy.Compress && r.acceptEncoding) {
		return false
	}
	pk := primaryKeyOf(string(r.host), path, query, b.Policy)
	o := e.store.lookupPlain(pk)
	if o == nil || o.status < 200 || o.status == http.StatusNoContent || o.status == http.StatusNotModified ||
		http.StatusText(int(o.status)) == "" {
		return false
	}
	now := e.now()
	age := o.age(now)
	if !o.freshFor(nil, age) {
		return false
	}
	head := string(r.method) == http.MethodHead
	if head && o.sniffed {
		return false
	}
	e.metrics.requests.Inc()
	e.metrics.hits.Inc()
	out := &h.out
	out.writeString("HTTP/1.1 ")
	out.writeInt(int64(o.status))
	out.writeString(" ")
	out.writeString(http.StatusText(int(o.status)))
	out.writeString("\r\nAge: ")
	out.writeInt(int64(age / time.Second))
	out.writeString("\r\n")
	if !o.hasDate {
		out.writeString("Date: ")
		out.write(httpNow())
		out.writeString("\r\n")
	}
	if !r.keep() {
		out.writeString("Connection: close\r\n")
	} else if r.Minor == 0 {
		out.writeString("Connection: keep-alive\r\n")
	}
	if head {
		out.write(o.data[:o.bodyStart])
		return true
	}
	out.body(o.data)
	if len(o.tail) > 0 {
		out.body(o.tail)
	}
	e.metrics.bytesServed.Add(float64(o.bodyLen()))
	return true
}

// plainTarget splits an origin-form target into its path and query when the path is one that
// net/url reads as it is: no percent-encoding and nothing it would escape, so that the behavior's
// match and the cache key are those ServeHTTP makes from r.URL.
func plainTarget(target []byte) (path, query string, ok bool) {
	t := string(target)
	path, query, _ = strings.Cut(t, "?")
	for i := 0; i < len(path); i++ {
		if c := path[i]; int(c) >= len(pathChars) || !pathChars[c] {
			return "", "", false
		}
	}
	return path, query, true
}

// pathChars are the bytes net/url keeps as they are in a path: unreserved and sub-delims, ':', '@'
// and '/'.
var pathChars = func() (t [128]bool) {
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/" {
		t[c] = true
	}
	return t
}()

// dateCache is the Date of answers, formatted once a second.
var dateCache atomic.Pointer[dateStamp]

type dateStamp struct {
	sec int64
	b   []byte
}

func httpNow() []byte {
	now := time.Now()
	if d := dateCache.Load(); d != nil && d.sec == now.Unix() {
		return d.b
	}
	d := &dateStamp{sec: now.Unix(), b: now.UTC().AppendFormat(nil, http.TimeFormat)}
	dateCache.Store(d)
	return d.b
}

// outbuf gathers a connection's answers until they are written: small bytes in one buffer, large
// stored bodies by reference, written with one writev on a TCP connection.
type outbuf struct {
	conn   net.Conn
	vec    bool // the connection takes net.Buffers in one writev
	buf    []byte
	mark   int // buf[:mark] is already in segs
	segs   net.Buffers
	queued int
}

func (o *outbuf) init(c net.Conn, vec bool) { o.conn, o.vec = c, vec }

func (o *outbuf) write(b []byte)       { o.buf = append(o.buf, b...) }
func (o *outbuf) writeString(s string) { o.buf = append(o.buf, s...) }
func (o *outbuf) writeInt(n int64)     { o.buf = strconv.AppendInt(o.buf, n, 10) }
func (o *outbuf) pending() int         { return len(o.buf) - o.mark + o.queued }

// body queues a body: copied when small or when the connection cannot take a vector, else by
// reference (stored bodies never change).
func (o *outbuf) body(b []byte) {
	if !o.vec || len(b) < 2048 {
		o.buf = append(o.buf, b...)
		return
	}
	o.segs = append(o.segs, o.buf[o.mark:], b)
	o.mark = len(o.buf)
	o.queued += len(b)
}

// flush writes what is queued.
func (o *outbuf) flush() error {
	var err error
	if len(o.segs) == 0 {
		if len(o.buf) > 0 {
			_, err = o.conn.Write(o.buf)
		}
	} else {
		if len(o.buf) > o.mark {
			o.segs = append(o.segs, o.buf[o.mark:])
		}
		v := o.segs
		_, err = v.WriteTo(o.conn)
		clear(o.segs)
		o.segs = o.segs[:0]
	}
	o.buf, o.mark, o.queued = o.buf[:0], 0, 0
	if cap(o.buf) > 64<<10 {
		o.buf = nil // a large streamed answer's buffer is not kept for the connection's life
	}
	return err
}

func itoa(n int) string { return strconv.Itoa(n) }
