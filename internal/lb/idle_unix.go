//go:build unix

package lb

import (
	"errors"
	"net"
	"syscall"
)

// peeker tells whether an idle connection to a target has anything to read. It is made once per
// connection, so that a peek allocates nothing.
type peeker struct {
	raw   syscall.RawConn
	peek  func(fd uintptr) bool
	clean bool
	buf   [1]byte
}

// rawConn returns the socket under c and the wrappers that have an Unwrap method, or false when
// there is none.
func rawConn(c net.Conn) (syscall.RawConn, bool) {
	for {
		u, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil, false
	}
	raw, err := sc.SyscallConn()
	return raw, err == nil
}

// newPeeker returns a peeker for c, or nil when c gives no access to its socket.
func newPeeker(c net.Conn) *peeker {
	raw, ok := rawConn(c)
	if !ok {
		return nil
	}
	p := &peeker{raw: raw}
	p.peek = func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), p.buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		p.clean = n < 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK))
		return true // never wait for readability: this is a peek
	}
	return p
}

// idleClean reports whether the connection has nothing to read: no bytes the target sent unasked, no
// end of stream, no error. Anything else means the connection is out of step with its requests or
// closing, and must not carry another one. It costs one non-blocking recv system call; net/http's
// transport gets the same verdict from a read loop goroutine per connection instead. Without a socket
// to peek at (p nil) only the buffered bytes are checked, by the caller.
func (p *peeker) idleClean() bool {
	if p == nil {
		return true
	}
	p.clean = false
	return p.raw.Read(p.peek) == nil && p.clean
}
