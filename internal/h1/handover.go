package h1

import (
	"net"
	"sync"
)

// This file is how a server of herd's hands a client connection to net/http's server: for HTTP/2,
// or for what it does not serve itself.

// ConnQueue is the net.Listener a net/http server accepts handed-over connections from.
type ConnQueue struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

// NewConnQueue makes a queue whose Addr is addr.
func NewConnQueue(addr net.Addr) *ConnQueue {
	return &ConnQueue{ch: make(chan net.Conn), done: make(chan struct{}), addr: addr}
}

// Put hands c to the server; it reports false, c untouched, once the queue is closed.
func (q *ConnQueue) Put(c net.Conn) bool {
	select {
	case q.ch <- c:
		return true
	case <-q.done:
		return false
	}
}

// Accept returns the next connection handed over.
func (q *ConnQueue) Accept() (net.Conn, error) {
	select {
	case c := <-q.ch:
		return c, nil
	case <-q.done:
		return nil, net.ErrClosed
	}
}

// Close ends the queue: Accept and Put fail from then on.
func (q *ConnQueue) Close() error {
	q.once.Do(func() { close(q.done) })
	return nil
}

// Addr is the address the queue was made with.
func (q *ConnQueue) Addr() net.Addr { return q.addr }

// ReplayConn returns bytes already read from Conn (Pending) before reading on.
type ReplayConn struct {
	net.Conn
	Pending []byte
}

func (c *ReplayConn) Read(p []byte) (int, error) {
	if len(c.Pending) > 0 {
		n := copy(p, c.Pending)
		c.Pending = c.Pending[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
