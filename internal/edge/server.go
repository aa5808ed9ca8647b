package edge

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"herd.dev/herd/internal/h1"
)

// This file is an edge listener's server. Its HTTP/1.x connections are served by herd's own engine
// (h1conn.go), which reads request heads with the load balancer's rules (package h1) and answers a
// fresh hit straight from the stored object, head and body in one write (h1hit.go): net/http's
// server spent more than half a hit's CPU in two write calls per response and its per-connection
// machinery. Every other GET and HEAD goes, on the same connection, through the handler with a
// ResponseWriter of the engine's own (h1writer.go), so that the cache answers it as it answers
// through net/http. A request with a body or another method, an Upgrade, an absolute or '*' target,
// HTTP/2 (h2 by ALPN, or prior knowledge) hands its connection, what was read of it replayed, to a
// net/http server with the same handler.

// ServerOptions are an edge listener's limits and its handler.
type ServerOptions struct {
	// Handler answers what the fast path does not: the Edge itself, or the Edge behind checks of
	// its own. Default: the Edge.
	Handler http.Handler
	// TLS, when set, makes the listener HTTPS. Clients that choose h2 by ALPN are served by net/http.
	TLS               *tls.Config
	MaxHeaderBytes    int           // default 64 KiB
	MaxHeaders        int           // field lines in a request head; default 100
	ReadHeaderTimeout time.Duration // default 10 s
	IdleTimeout       time.Duration // default 2 min
	Logger            *slog.Logger
}

// Server serves an Edge on listeners.
type Server struct {
	e    *Edge
	opts ServerOptions
	log  *slog.Logger
	std  *http.Server // HTTP/2, and the connections handed over
	q    *h1.ConnQueue

	mu       sync.Mutex
	lns      map[net.Listener]struct{}
	conns    map[*h1conn]struct{}
	closing  atomic.Bool
	stdOnce  sync.Once
	stdCalls sync.WaitGroup
}

// NewServer makes a server for e.
func NewServer(e *Edge, opts ServerOptions) *Server {
	if opts.Handler == nil {
		opts.Handler = e
	}
	if opts.MaxHeaderBytes <= 0 {
		opts.MaxHeaderBytes = 64 << 10
	}
	if opts.MaxHeaders <= 0 {
		opts.MaxHeaders = 100
	}
	if opts.ReadHeaderTimeout <= 0 {
		opts.ReadHeaderTimeout = 10 * time.Second
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = 2 * time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{e: e, opts: opts, log: opts.Logger, q: h1.NewConnQueue(&net.TCPAddr{}),
		lns: map[net.Listener]struct{}{}, conns: map[*h1conn]struct{}{}}
	s.std = &http.Server{Handler: opts.Handler, TLSConfig: opts.TLS, ReadHeaderTimeout: opts.ReadHeaderTimeout,
		IdleTimeout: opts.IdleTimeout, MaxHeaderBytes: opts.MaxHeaderBytes,
		ErrorLog: slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn)}
	return s
}

// Serve accepts connections on ln until it is closed; it returns http.ErrServerClosed after
// Shutdown or Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing.Load() {
		s.mu.Unlock()
		return http.ErrServerClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	s.stdOnce.Do(func() {
		s.stdCalls.Go(func() { s.std.Serve(s.q) })
	})
	var delay time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.closing.Load() {
				return http.ErrServerClosed
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			delay = h1.AcceptBackoff(delay)
			s.log.Error("accept failed", "error", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if s.opts.TLS != nil {
			go s.serveTLS(c)
		} else {
			go s.serveH1(c, c)
		}
	}
}

// serveTLS makes c's TLS session, then serves it with the engine, or with net/http when the client
// chose h2.
func (s *Server) serveTLS(c net.Conn) {
	tc := tls.Server(c, s.opts.TLS)
	tc.SetDeadline(time.Now().Add(s.opts.ReadHeaderTimeout))
	if err := tc.Handshake(); err != nil {
		s.log.Debug("TLS handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		c.Close()
		return
	}
	tc.SetDeadline(time.Time{})
	if tc.ConnectionState().NegotiatedProtocol == "h2" {
		s.handOver(tc)
		return
	}
	s.serveH1(c, tc)
}

// handOver gives a connection to the net/http server.
func (s *Server) handOver(c net.Conn) {
	if !s.q.Put(c) {
		c.Close()
	}
}

// Shutdown stops accepting, closes idle connections, and waits until ctx ends for busy ones to
// finish their request; what is left then is closed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopAccepting()
	stdErr := s.std.Shutdown(ctx)
	for {
		if s.closeIdle() == 0 {
			break
		}
		select {
		case <-ctx.Done():
			s.Close()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	s.q.Close()
	s.stdCalls.Wait()
	return stdErr
}

// Close closes the listeners and every connection at once.
func (s *Server) Close() error {
	s.stopAccepting()
	err := s.std.Close()
	s.mu.Lock()
	for h := range s.conns {
		h.conn.Close()
	}
	s.mu.Unlock()
	s.q.Close()
	s.stdCalls.Wait()
	return err
}

func (s *Server) stopAccepting() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closing.Store(true)
	for ln := range s.lns {
		ln.Close()
	}
	clear(s.lns)
}

// closeIdle closes the connections that wait for a request, and returns how many are busy.
func (s *Server) closeIdle() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	busy := 0
	for h := range s.conns {
		if h.active.Load() {
			busy++
		} else {
			h.conn.Close()
		}
	}
	return busy
}

// track registers or forgets a connection; it refuses new ones once closing.
func (s *Server) track(h *h1conn, add bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		delete(s.conns, h)
		return true
	}
	if s.closing.Load() {
		return false
	}
	s.conns[h] = struct{}{}
	return true
}
