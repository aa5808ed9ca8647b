//go:build !unix

package lb

import "net"

// peeker cannot peek at a connection here: only the buffered bytes are checked.
type peeker struct{}

func newPeeker(net.Conn) *peeker { return nil }

func (*peeker) idleClean() bool { return true }
