package edge

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"net/http"
	"strconv"
	"strings"
)

// This file serves through the handler the GETs and HEADs that the engine does not answer as plain
// hits: misses, conditional and range requests, stale hits. The request is read by net/http's own
// reader from the head the engine checked, and the answer framed as net/http's server frames it
// (fields sorted, Date added, a missing Content-Type sniffed, a short body given its length, a long
// one chunked), so that the handler's answers are the same through either server.

// serveHandler answers h.req through the server's handler, and reports whether the connection may
// carry another request.
func (h *h1conn) serveHandler() bool {
	// The reader's buffer holds the whole head, which is all there is to read: not the default 4
	// KiB, garbage once the request is read.
	req, err := http.ReadRequest(bufio.NewReaderSize(bytes.NewReader(h.req.raw), len(h.req.raw)))
	if err != nil {
		h.out.write(errorResponse(http.StatusBadRequest))
		return false
	}
	req = req.WithContext(h.ctx)
	req.RemoteAddr = h.raw.RemoteAddr().String()
	if tc, ok := h.conn.(*tls.Conn); ok {
		st := tc.ConnectionState()
		req.TLS = &st
	}
	w := &respWriter{h: h, req: req, header: http.Header{}, head: req.Method == http.MethodHead, clen: -1}
	if !w.run(h.s.opts.Handler) {
		return false
	}
	return h.req.keep() && !w.closeAfter
}

// respWriter is the engine's http.ResponseWriter.
type respWriter struct {
	h                 *h1conn
	req               *http.Request
	header            http.Header
	status            int
	wroteHeader, sent bool // WriteHeader called; the head written out
	head              bool
	chunked           bool
	clen, written     int64 // declared length (-1: none) and body bytes written
	pending           []byte
	closeAfter        bool
}

// run calls the handler. A handler that panics (http.ErrAbortHandler: a body that broke midway)
// ends the connection, so that the client sees an error rather than a short answer that looks
// whole.
func (w *respWriter) run(handler http.Handler) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if v != http.ErrAbortHandler {
				w.h.s.log.Error("edge handler panicked", "panic", v)
			}
			w.h.out.flush()
			ok = false
		}
	}()
	handler.ServeHTTP(w, w.req)
	w.finish()
	return true
}

func (w *respWriter) Header() http.Header { return w.header }

func (w *respWriter) WriteHeader(code int) {
	if w.wroteHeader || code < 100 || code > 999 {
		return
	}
	if code < 200 && code != http.StatusSwitchingProtocols {
		w.writeStatus(code)
		w.header.Write(w.buf())
		w.h.out.writeString("\r\n")
		return
	}
	w.wroteHeader, w.status = true, code
	if cl := strings.TrimSpace(w.header.Get("Content-Length")); cl != "" {
		if n, err := strconv.ParseInt(cl, 10, 64); err == nil && n >= 0 {
			w.clen = n
		}
	}
}

// bodyAllowed reports whether the status may carry a body (RFC 9110 section 6.4.1).
func (w *respWriter) bodyAllowed() bool {
	return w.status >= 200 && w.status != http.StatusNoContent && w.status != http.StatusNotModified
}

func (w *respWriter) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.bodyAllowed() {
		return 0, http.ErrBodyNotAllowed
	}
	if w.clen >= 0 && w.written+int64(len(p)) > w.clen {
		return 0, http.ErrContentLength
	}
	w.written += int64(len(p))
	if !w.sent {
		if w.clen < 0 && len(w.pending)+len(p) <= 2048 {
			// A short answer whose handler says no length gets one when it ends, as net/http
			// gives it.
			w.pending = append(w.pending, p...)
			return len(p), nil
		}
		n := len(p)
		if len(w.pending) > 0 {
			p = append(w.pending, p...)
			w.pending = nil
		}
		// body copies p into the connection's output: p itself is neither kept nor copied first,
		// which for a miss's stored body would be garbage of the body's size.
		w.send(p)
		w.body(p)
		return n, nil
	}
	w.body(p)
	return len(p), nil
}

// Flush sends what the handler wrote so far.
func (w *respWriter) Flush() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		w.send(w.pending)
		w.body(w.pending)
		w.pending = nil
	}
	w.h.out.flush()
}

// finish ends the answer once the handler returned.
func (w *respWriter) finish() {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	if !w.sent {
		if w.clen < 0 && w.bodyAllowed() && (!w.head || len(w.pending) > 0) {
			w.clen = int64(len(w.pending))
			w.header.Set("Content-Length", strconv.Itoa(len(w.pending)))
		}
		w.send(w.pending)
		w.body(w.pending)
	}
	if w.chunked {
		w.h.out.writeString("0\r\n\r\n")
	}
	if w.clen >= 0 && w.written < w.clen && w.bodyAllowed() && !w.head {
		w.closeAfter = true // the client waits for bytes that will not come
	}
}

// body writes body bytes, framed.
func (w *respWriter) body(p []byte) {
	if len(p) == 0 || w.head || !w.bodyAllowed() {
		return
	}
	out := &w.h.out
	if w.chunked {
		out.buf = strconv.AppendInt(out.buf, int64(len(p)), 16)
		out.writeString("\r\n")
		out.write(p)
		out.writeString("\r\n")
	} else {
		out.write(p)
	}
	if out.pending() > 32<<10 {
		out.flush()
	}
}

// send writes the status line and fields, as net/http's server would for this answer; sniff is the
// start of the body.
func (w *respWriter) send(sniff []byte) {
	w.sent = true
	h := w.header
	if w.bodyAllowed() {
		if _, ok := h["Content-Type"]; !ok && len(sniff) > 0 && h.Get("Transfer-Encoding") == "" {
			h.Set("Content-Type", http.DetectContentType(sniff[:min(len(sniff), 512)]))
		}
	} else {
		h.Del("Transfer-Encoding")
		h.Del("Content-Length")
		if w.status == http.StatusNotModified {
			h.Del("Content-Type")
		}
	}
	if _, ok := h["Date"]; !ok {
		h.Set("Date", string(httpNow()))
	}
	if hasToken(h["Connection"], "close") {
		w.closeAfter = true
	}
	switch {
	case w.head || !w.bodyAllowed():
		h.Del("Transfer-Encoding")
	case w.clen >= 0:
		h.Del("Transfer-Encoding")
	case w.req.ProtoAtLeast(1, 1):
		w.chunked = true
		h.Set("Transfer-Encoding", "chunked")
	default:
		w.closeAfter = true
	}
	h.Del("Connection")
	if w.closeAfter || !w.h.req.keep() {
		h.Set("Connection", "close")
	} else if w.req.ProtoMinor == 0 {
		h.Set("Connection", "keep-alive")
	}
	w.writeStatus(w.status)
	h.Write(w.buf())
	w.h.out.writeString("\r\n")
}

func (w *respWriter) writeStatus(code int) {
	out := &w.h.out
	out.writeString("HTTP/1.1 ")
	out.writeInt(int64(code))
	out.writeString(" ")
	if text := http.StatusText(code); text != "" {
		out.writeString(text)
	} else {
		out.writeString("status code " + strconv.Itoa(code))
	}
	out.writeString("\r\n")
}

// buf is the connection's output as an io.Writer.
func (w *respWriter) buf() *outWriter { return (*outWriter)(&w.h.out) }

type outWriter outbuf

func (o *outWriter) Write(p []byte) (int, error) {
	o.buf = append(o.buf, p...)
	return len(p), nil
}

// hasToken reports whether a comma-separated field's values list tok.
func hasToken(values []string, tok string) bool {
	for _, v := range values {
		for _, m := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(m), tok) {
				return true
			}
		}
	}
	return false
}
