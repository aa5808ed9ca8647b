package lb

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkH1Proxy measures one keep-alive GET through the HTTP/1.x engine to a loopback target:
// go test ./internal/lb -run '^$' -bench H1Proxy -benchmem -memprofile mem.out
// The allocations it reports are the in-process client's and target's (both net/http); the memory
// profile shows none in the engine itself.
func BenchmarkH1Proxy(b *testing.B) {
	body := make([]byte, 1024)
	be := newBackend(b, "b", func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
	l := httpListener(TargetGroup{Name: "r1", Targets: targets(be)})
	l.HealthCheck.Disabled = true
	lb := startLBWith(b, EngineFast, Config{Listeners: []Listener{l}}, slogTo(io.Discard))
	c, err := net.Dial("tcp", lb.Addr("web/http").String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	keepAliveGETs(b, c)
}

// keepAliveGETs sends GETs one after another over c, each read whole before the next, for b.Loop.
func keepAliveGETs(b *testing.B, c net.Conn) {
	br := bufio.NewReader(c)
	req := []byte("GET / HTTP/1.1\r\nHost: bench\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkIdleClean measures the peek that every reuse of a pooled target connection costs.
func BenchmarkIdleClean(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			defer c.Close()
			io.Copy(io.Discard, c)
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	p := newPeeker(c)
	b.ReportAllocs()
	for b.Loop() {
		if !p.idleClean() {
			b.Fatal("a quiet connection is not clean")
		}
	}
}

// BenchmarkTLSHandshake measures a new TLS connection carrying one GET with "Connection: close"
// through the HTTP/1.x engine, a full handshake each time (the client keeps no session):
// go test ./internal/lb -run '^$' -bench TLSHandshake -benchmem -memprofile mem.out
// The figures include the in-process client's handshake and the target's work; the profiles show
// the listener's share under serveTLS.
func BenchmarkTLSHandshake(b *testing.B) {
	addr, pool := tlsBenchLB(b)
	cfg := &tls.Config{RootCAs: pool, CurvePreferences: []tls.CurveID{tls.X25519}, NextProtos: []string{"http/1.1"}}
	req := []byte("GET / HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		c.Close()
	}
}

// BenchmarkTLSKeepAlive measures one keep-alive GET over a TLS session through the HTTP/1.x engine:
// go test ./internal/lb -run '^$' -bench TLSKeepAlive -benchmem -memprofile mem.out -cpuprofile cpu.out
// As in BenchmarkH1Proxy, the allocations it reports are the in-process client's and target's; the
// memory profile shows what the listener's side allocates.
func BenchmarkTLSKeepAlive(b *testing.B) {
	addr, pool := tlsBenchLB(b)
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	keepAliveGETs(b, c)
}

// tlsBenchLB starts a TLS listener on the fast engine in front of a target answering 1 KiB; it returns
// the listener's address and the pool that verifies its certificate.
func tlsBenchLB(b *testing.B) (string, *x509.CertPool) {
	certFile, keyFile, pool := writeCert(b)
	body := make([]byte, 1024)
	be := newBackend(b, "b", func(w http.ResponseWriter, r *http.Request) { w.Write(body) })
	l := httpListener(TargetGroup{Name: "r1", Targets: targets(be)})
	l.HealthCheck.Disabled = true
	l.TLS = &TLS{CertFile: certFile, KeyFile: keyFile}
	lb := startLBWith(b, EngineFast, Config{Listeners: []Listener{l}}, slogTo(io.Discard))
	return lb.Addr("web/http").String(), pool
}
