package lb

import (
	"bufio"
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
