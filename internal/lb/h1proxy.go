package lb

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"time"

	"herd.dev/herd/internal/h1"
)

// This file is the fast engine's part of the proxy core's exchange (core.go): it sends the request an
// h1conn read to a target and relays the answer.

// proxy forwards the request read into h.req through the proxy core and relays the answer. It reports
// whether the client connection may carry another request.
func (h *h1conn) proxy(st *listenerState, start time.Time) bool {
	r := &h.req
	h.start, h.keep, h.bodyDone = start, false, false
	// X-Forwarded-Proto is what the client spoke, to the listener it connected to.
	h.buildOut(st.tlsOn)
	l := h.l
	if st.hosts != nil {
		host := r.host.in(r.raw)
		if r.hasAbsHost {
			host = r.absHost.in(r.raw)
		}
		if l, st = st.routed(host); l == nil {
			h.l.unknownHost(h, host, start)
			return h.keep
		}
		// The router read the head without knowing what the routed listener picks by.
		for _, hl := range r.hdrs {
			_, vs, ve, _ := h1.CheckField(hl.line.in(r.raw))
			r.noteRouting(hl.name.in(r.raw), span{hl.line.start + vs, hl.line.start + ve}, st.routes)
		}
	}
	h.key = h.pickKey(st.routes)
	if r.expectContinue && r.HasBody() && r.minor == 1 {
		// The body is streamed to whichever target is chosen: ask for it now.
		h.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if h.bw.Flush() != nil {
			return false
		}
	}
	l.forward(context.Background(), st, h, &h.key, idempotentBytes(r.method.in(r.raw)), start)
	return h.keep
}

// fail answers with a proxy error. The connection can carry on only if the request was read whole.
func (h *h1conn) fail(code int) {
	h.keep = h.clientKeep() && (!h.req.HasBody() || h.bodyDone)
	h.writeError(code, !h.keep)
}

func (h *h1conn) client() netip.Addr { return connAddr(h.c.Conn) }

// wire is where an upgraded connection's bytes from the target go: the TCP connection itself in
// cleartext, so that the copy can splice, or the TLS session.
func (h *h1conn) wire() net.Conn {
	if h.conn == net.Conn(h.c) {
		return h.c.Conn
	}
	return h.conn
}

// refuse answers with code and a plain-text body.
func (h *h1conn) refuse(code, retryAfter int, body string) {
	h.keep = h.clientKeep() && (!h.req.HasBody() || h.bodyDone)
	h.writeBy(time.Now().Add(5*time.Second), 0)
	b := fmt.Appendf(nil, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Content-Type-Options: nosniff\r\nContent-Length: %d\r\n", code, http.StatusText(code), len(body))
	if retryAfter > 0 {
		b = fmt.Appendf(b, "Retry-After: %d\r\n", retryAfter)
	}
	if !h.keep {
		b = append(b, "Connection: close\r\n"...)
	}
	b = append(b, "\r\n"...)
	h.bw.Write(append(b, body...))
	h.bw.Flush()
}

// clientKeep reports whether the client wants its connection kept after this request.
func (h *h1conn) clientKeep() bool {
	r := &h.req
	if r.minor == 0 {
		return r.KeepAlive && !r.Close
	}
	return !r.Close
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
	if r.Hosts == 0 && !r.hasAbsHost {
		bc.bw.WriteString("Host: ")
		bc.bw.WriteString(t.key.addr)
		bc.bw.WriteString("\r\n")
	}
	bc.bw.WriteString("\r\n")
	if r.HasBody() {
		o.bodySent = true
		h.readBy(sent.Add(st.cfg.Timeouts.Read.D()), 0)
		var rerr, werr error
		if r.Chunked {
			rerr, werr = relayChunked(bc.bw, h.br, true, st.maxBody, nil)
		} else {
			rerr, werr = relayN(bc.bw, h.br, r.ContentLength, nil)
		}
		h.bodyDone = rerr == nil && werr == nil
		if rerr != nil {
			// The client's body broke off or was malformed: the request is over.
			bc.c.Close()
			clientGone(t, h.start)
			var he *httpError
			if errors.As(rerr, &he) {
				h.l.badRequest(h.c.RemoteAddr().String(), he.Error())
				h.writeError(he.Code, true)
			}
			return outcome{done: true}
		}
		if werr != nil {
			bc.c.Close()
			o.kind, o.err = failBroken, werr
			return o
		}
	}
	// Let the other connections that are ready read their requests before this one leaves: the
	// requests of one wakeup then reach the targets together, and a target woken by the first finds
	// the others waiting instead of going back to sleep between them (docs/benchmarks/lb.md). With
	// nothing else runnable it returns at once.
	runtime.Gosched()
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
	reusable := rerr == nil && werr == nil && !resp.Close && (resp.minor == 1 || resp.KeepAlive) &&
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

// switchProtocols completes an upgrade (WebSocket and the like): bytes then flow both ways until either
// side closes.
func (h *h1conn) switchProtocols(st *listenerState, t *target, bc *bconn) outcome {
	r, resp := &h.req, &h.resp
	if !r.UpgradeAsked || !r.hasUpgrade || !resp.hasUpgrade || !bytes.EqualFold(r.upgrade.in(r.raw), resp.upgrade.in(resp.raw)) {
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
	h.conn.SetDeadline(time.Time{})
	h.readDL, h.writeDL = time.Time{}, time.Time{}
	bc.c.SetDeadline(time.Time{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.br.WriteTo(bc.c) // whatever the client sent after its request first, then the rest
		bc.c.Close()
	}()
	bc.br.WriteTo(h.wire())
	h.conn.Close()
	<-done
	return outcome{done: true}
}

func idempotentBytes(method []byte) bool {
	switch string(method) { // the conversion does not allocate in a switch
	case "GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE":
		return true
	}
	return false
}
