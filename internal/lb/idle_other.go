//go:build !unix

package lb

import "net"

// idleClean cannot peek at a connection here: only the buffered bytes are checked.
func idleClean(net.Conn) bool { return true }
