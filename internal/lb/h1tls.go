package lb

import (
	"crypto/tls"
	"time"
)

// This file serves TLS listeners' HTTP/1.x clients with the engine of h1.go: the TLS session is made
// here, and a client that chose h2 by ALPN goes to net/http's server, which serves HTTP/2. Over TLS
// most of a keep-alive request's cost used to be net/http's server rather than the cipher, so the
// engine pays there as it does in cleartext.

// serveTLS makes c's TLS session and serves it.
func (l *listener) serveTLS(c *clientConn) {
	tc := tls.Server(c, l.tls)
	// The handshake gets the time net/http would give it: the shortest of the listener's
	// read-header, read and write timeouts.
	if d := handshakeTimeout(l.state.Load().cfg.Timeouts); d > 0 {
		tc.SetDeadline(time.Now().Add(d))
	}
	if err := tc.Handshake(); err != nil {
		l.log.Debug("TLS handshake failed", "remote", c.RemoteAddr().String(), "error", err)
		c.Close()
		return
	}
	tc.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		l.enqueue(tc)
		return
	}
	l.serveH1(c, tc)
}

// handshakeTimeout is the shortest of t's timeouts that are set, as net/http's server bounds a TLS
// handshake; 0 when none is.
func handshakeTimeout(t Timeouts) time.Duration {
	var d time.Duration
	for _, v := range []time.Duration{t.ReadHeader.D(), t.Read.D(), t.Write.D()} {
		if v > 0 && (d == 0 || v < d) {
			d = v
		}
	}
	return d
}
