package lb

import (
	"net"
	"time"

	"golang.org/x/sys/unix"
)

// socketRTT returns the kernel's smoothed round-trip time of a TCP connection (TCP_INFO's
// tcpi_rtt), or false when c is no TCP socket, is closed, or has no estimate yet. It is one
// getsockopt system call.
func socketRTT(c net.Conn) (time.Duration, bool) {
	raw, ok := rawConn(c)
	if !ok {
		return 0, false
	}
	var info *unix.TCPInfo
	var serr error
	if err := raw.Control(func(fd uintptr) {
		info, serr = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || serr != nil || info.Rtt == 0 {
		return 0, false
	}
	return time.Duration(info.Rtt) * time.Microsecond, true
}
