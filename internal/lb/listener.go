package lb

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"herd.dev/herd/internal/busypoll"
	"herd.dev/herd/internal/h1"
)

// socket is one bound TCP listening socket. It outlives listener objects: while some listener of the
// config keeps its address, the socket stays open and only the handler behind it changes, so an Apply
// never refuses a connection.
type socket struct {
	key     string
	ln      net.Listener
	log     *slog.Logger
	handler atomic.Pointer[listener]
	open    atomic.Int64  // client connections open now
	freed   chan struct{} // signalled when a connection closes, to resume accepting at the limit
	closed  atomic.Bool
	done    chan struct{}
	rtt     *rttTable // the load balancer's client networks
}

func newSocket(key string, ln net.Listener, log *slog.Logger, rtt *rttTable) *socket {
	return &socket{key: key, ln: ln, log: log, freed: make(chan struct{}, 1), done: make(chan struct{}), rtt: rtt}
}

// serve accepts connections until the socket is closed and hands each to the current listener.
func (s *socket) serve() {
	defer close(s.done)
	var backoff time.Duration
	for {
		for l := s.handler.Load(); l != nil && s.open.Load() >= int64(l.maxConns()); l = s.handler.Load() {
			// At the connection limit, leave new clients in the kernel's accept queue.
			select {
			case <-s.freed:
			case <-time.After(100 * time.Millisecond):
			}
			if s.closed.Load() {
				return
			}
		}
		c, err := s.ln.Accept()
		if err != nil {
			if s.closed.Load() {
				return
			}
			// Out of file descriptors and the like: back off as net/http does, rather than spin.
			backoff = h1.AcceptBackoff(backoff)
			s.log.Error("accept failed", "error", err, "retry_in", backoff)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		busypoll.Activity()
		s.open.Add(1)
		cc := &clientConn{Conn: c, sock: s}
		if l := s.handler.Load(); l != nil {
			l.serveConn(cc)
		} else {
			cc.Close()
		}
	}
}

func (s *socket) close() {
	if s.closed.CompareAndSwap(false, true) {
		s.ln.Close()
	}
}

// clientConn is a client connection: it keeps the socket's open count and logs the requests that
// net/http's parser rejects before any handler sees them.
type clientConn struct {
	net.Conn
	sock   *socket
	closed atomic.Bool
	rttAt  atomic.Int64 // when its round-trip time was last sampled (unix nanoseconds), 0: never
}

// sampleRTT feeds the connection's round-trip time to the client networks' table, unless it was
// sampled less than rttResample before now: a branch per request, a system call per connection.
func (c *clientConn) sampleRTT(now time.Time) {
	if last := c.rttAt.Load(); last != 0 && now.UnixNano()-last < int64(rttResample) {
		return
	}
	c.rttAt.Store(now.UnixNano())
	c.sock.rtt.sampleConn(c.Conn)
}

// asClientConn finds the client connection under what net/http's server hands its hooks.
func asClientConn(c net.Conn) *clientConn {
	switch v := c.(type) {
	case *clientConn:
		return v
	case *h1.ReplayConn:
		return asClientConn(v.Conn)
	case *tls.Conn:
		return asClientConn(v.NetConn())
	}
	return nil
}

func (c *clientConn) Close() error {
	if c.closed.CompareAndSwap(false, true) {
		if c.rttAt.Load() == 0 {
			// A connection that carried no request (or a TCP listener's) is sampled as it ends.
			c.sampleRTT(time.Now())
		}
		c.sock.open.Add(-1)
		select {
		case c.sock.freed <- struct{}{}:
		default:
		}
	}
	return c.Conn.Close()
}

// CloseWrite lets net/http half-close the connection after an error response, as it does on a TCP conn.
func (c *clientConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// serverErrorHeaders is what net/http writes right after the status line when its parser rejects a
// request (malformed syntax, oversized headers): a handler's response always carries other headers first.
var serverErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

func (c *clientConn) Write(p []byte) (int, error) {
	if len(p) > 12 && p[9] >= '4' && bytes.HasPrefix(p, []byte("HTTP/1.1 ")) {
		if i := bytes.Index(p, serverErrorHeaders); i > 9 && bytes.IndexByte(p[9:i], '\n') < 0 {
			if l := c.sock.handler.Load(); l != nil {
				l.badRequest(c.RemoteAddr().String(), string(p[9:i]))
			}
		}
	}
	return c.Conn.Write(p)
}

// listener is the serving side of one configured listener: an http.Server or a TCP proxy. Routing state
// is swapped in place on every Apply; a change to what the http.Server itself was built with (protocol,
// TLS, timeouts, header limit) makes a new listener on the same socket instead, and the old one drains.
type listener struct {
	name  string
	lb    *LB
	log   *slog.Logger
	sock  *socket
	built serverSettings

	state atomic.Pointer[listenerState]
	cert  atomic.Pointer[tls.Certificate]
	// certSeen is the certificate files' stamp when they were last looked at (certreload.go).
	certSeen atomic.Pointer[certStamp]
	stats    *counters // requests no target could take
	budget   *retryBudget

	srv   *http.Server  // HTTP listeners: serves HTTP/2 and TLS, and HTTP/1.x when the engine cannot
	tls   *tls.Config   // TLS listeners: their sessions' settings (net/http sets srv.TLSConfig for h2c too)
	queue *h1.ConnQueue // HTTP listeners
	tcpWG sync.WaitGroup

	closing atomic.Bool // shutting down: connections end after their current request
	h1mu    sync.Mutex  // guards h1conns
	h1conns map[*h1conn]struct{}
	h1wg    sync.WaitGroup // connection goroutines of the engine

	badMu      sync.Mutex
	badWindow  time.Time
	badLogged  int
	badDropped int
}

// serverSettings are what an http.Server is built with; they cannot change on a running server.
type serverSettings struct {
	protocol                      Protocol
	tls                           bool
	readHeader, read, write, idle time.Duration
	maxHeaderBytes                int
}

func settingsOf(l Listener) serverSettings {
	return serverSettings{
		protocol: l.Protocol, tls: l.TLS != nil,
		readHeader: l.Timeouts.ReadHeader.D(), read: l.Timeouts.Read.D(),
		write: l.Timeouts.Write.D(), idle: l.Timeouts.Idle.D(),
		maxHeaderBytes: l.Limits.MaxHeaderBytes,
	}
}

// listenerState is everything a request needs from the config, read once per request.
type listenerState struct {
	cfg          Listener
	routes       *routes
	maxBody      int64
	maxHeaders   int
	threshold5xx int
	retry        bool
	tlsOn        bool
	drainTimeout time.Duration
	h1           bool // HTTP/1.x clients are served by the engine of h1.go
	// refused are the instances the listener refuses (Listener.AllowFrom), with their fleet; nil
	// when it takes every fleet's.
	refused map[netip.Addr]string
	// hosts are a host router's listeners by the Host they serve (Listener.Routes); nil on
	// every other listener.
	hosts map[string]*listener
}

func (l *listener) maxConns() int {
	if st := l.state.Load(); st != nil {
		return st.cfg.Limits.MaxConnections
	}
	return defaultMaxConnections
}

func newListener(lb *LB, cfg Listener, sock *socket, stats *counters, budget *retryBudget) *listener {
	l := &listener{
		name: cfg.Name, lb: lb, sock: sock, built: settingsOf(cfg),
		log:   lb.log.With("listener", cfg.Name, "fleet", cfg.Fleet),
		stats: stats, budget: budget,
	}
	if cfg.Protocol == ProtocolHTTP {
		l.queue = h1.NewConnQueue(sock.ln.Addr())
		l.srv = &http.Server{
			Handler:           l,
			ReadHeaderTimeout: cfg.Timeouts.ReadHeader.D(),
			ReadTimeout:       cfg.Timeouts.Read.D(),
			WriteTimeout:      cfg.Timeouts.Write.D(),
			IdleTimeout:       cfg.Timeouts.Idle.D(),
			MaxHeaderBytes:    cfg.Limits.MaxHeaderBytes,
			ErrorLog:          slog.NewLogLogger(l.log.Handler(), slog.LevelWarn),
			Protocols:         new(http.Protocols),
			ConnState: func(c net.Conn, s http.ConnState) {
				if s == http.StateIdle { // a request was answered
					if cc := asClientConn(c); cc != nil {
						cc.sampleRTT(time.Now())
					}
				}
			},
		}
		l.srv.Protocols.SetHTTP1(true)
		if cfg.TLS != nil {
			l.srv.Protocols.SetHTTP2(true)
			l.tls = &tls.Config{
				MinVersion: tls.VersionTLS12,
				NextProtos: []string{"h2", "http/1.1"},
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
					return l.cert.Load(), nil
				},
			}
			// A copy: net/http writes to its TLSConfig as it starts to serve, and l.tls is in use
			// by then. Set, with "h2" in its NextProtos, it tells Serve to speak h2 on sessions
			// whose client chose it.
			l.srv.TLSConfig = l.tls.Clone()
		} else {
			l.srv.Protocols.SetUnencryptedHTTP2(true)
		}
	}
	return l
}

// start serves the listener; it returns at once.
func (l *listener) start() {
	if l.srv == nil {
		return
	}
	go func() {
		// Serve, not ServeTLS, on TLS listeners too: serveConn wraps each connection in its TLS
		// session (h1tls.go), and net/http speaks h2 on those whose client chose it by ALPN.
		if err := l.srv.Serve(l.queue); err != nil && !errors.Is(err, http.ErrServerClosed) {
			l.log.Error("listener stopped", "error", err)
		}
	}()
}

// serveConn takes one accepted client connection.
func (l *listener) serveConn(c net.Conn) {
	if l.srv == nil {
		l.tcpWG.Add(1)
		go func() {
			defer l.tcpWG.Done()
			l.proxyTCP(c)
		}()
		return
	}
	cc, ok := c.(*clientConn)
	fast := ok && l.state.Load().h1
	switch {
	case l.tls != nil && fast:
		l.h1wg.Add(1)
		go func() {
			defer l.h1wg.Done()
			l.serveTLS(cc)
		}()
	case l.tls != nil:
		l.enqueue(tls.Server(c, l.tls))
	case fast:
		l.h1wg.Add(1)
		go func() {
			defer l.h1wg.Done()
			l.serveH1(cc, cc)
		}()
	default:
		l.enqueue(c)
	}
}

// enqueue gives a connection to the listener's net/http server.
func (l *listener) enqueue(c net.Conn) {
	if !l.queue.Put(c) {
		// This listener was replaced while the connection was on its way: give it to the new one,
		// which makes its own TLS session if the handshake has not started.
		next := l.sock.handler.Load()
		if tc, ok := c.(*tls.Conn); ok && !tc.ConnectionState().HandshakeComplete {
			c = tc.NetConn()
		} else if ok {
			next = nil // a session made with this listener's certificate: the client reconnects
		}
		if next != nil && next != l {
			next.serveConn(c)
		} else {
			c.Close()
		}
	}
}

// shutdown stops taking connections and waits up to timeout for requests in flight, then closes what is left.
func (l *listener) shutdown(timeout time.Duration) {
	if l.srv == nil {
		done := make(chan struct{})
		go func() { l.tcpWG.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(timeout):
		}
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var wg sync.WaitGroup
	wg.Go(func() {
		deadline, _ := ctx.Deadline()
		l.shutdownH1(deadline)
	})
	if err := l.srv.Shutdown(ctx); err != nil {
		l.srv.Close()
	}
	wg.Wait()
	l.h1wg.Wait() // every connection was closed above, so this is quick
}

// badRequest logs a rejected request, at most ten lines a second per listener so a flood cannot drown the log.
func (l *listener) badRequest(remote, why string) {
	l.badMu.Lock()
	now := time.Now()
	if now.Sub(l.badWindow) >= time.Second {
		if l.badDropped > 0 {
			l.log.Warn("bad requests not logged", "count", l.badDropped)
		}
		l.badWindow, l.badLogged, l.badDropped = now, 0, 0
	}
	log := l.badLogged < 10
	if log {
		l.badLogged++
	} else {
		l.badDropped++
	}
	l.badMu.Unlock()
	l.lb.badRequests.Add(1)
	if log {
		l.log.Warn("bad request", "remote", remote, "status", why)
	}
}
