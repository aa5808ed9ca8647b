//go:build !linux

package lb

import (
	"net"
	"time"
)

// socketRTT reads no round-trip time where TCP_INFO is not Linux's: client networks and targets
// then have no RTT figures, and the nearest group policy falls back to the config order.
func socketRTT(net.Conn) (time.Duration, bool) { return 0, false }
