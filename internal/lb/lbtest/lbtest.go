// Package lbtest has the backends that load balancer tests put behind a listener.
package lbtest

import (
	"io"
	"net"
	"testing"
)

// EchoServer serves TCP on loopback, sending back what each connection sends until the client
// half-closes it, then closing it. It stops with the test; its address is returned.
func EchoServer(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}
