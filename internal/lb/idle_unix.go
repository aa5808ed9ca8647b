//go:build unix

package lb

import (
	"errors"
	"net"
	"syscall"
)

// idleClean reports whether an idle connection to a target has nothing to read: no bytes the target
// sent unasked, no end of stream, no error. Anything else means the connection is out of step with its
// requests or closing, and must not carry another one. It costs one non-blocking peek (a recv system
// call); net/http's transport gets the same verdict from a read loop goroutine per connection instead.
func idleClean(c net.Conn) bool {
	for {
		u, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true // nothing to peek with: only the buffered bytes were checked
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	clean := false
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		clean = n < 0 && (errors.Is(rerr, syscall.EAGAIN) || errors.Is(rerr, syscall.EWOULDBLOCK))
		return true // never wait for readability: this is a peek
	})
	return err == nil && clean
}
