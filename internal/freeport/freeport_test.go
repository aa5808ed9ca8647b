package freeport

import (
	"fmt"
	"net"
	"testing"
)

func TestTCPIsOutsideTheEphemeralRangeAndBinds(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		port := TCP(t)
		if port < first || port >= low || seen[port] {
			t.Fatalf("TCP gave %d: want a port in %d-%d, not given before", port, first, low-1)
		}
		seen[port] = true
		ln, err := net.Listen("tcp", fmt.Sprintf("0.0.0.0:%d", port))
		if err != nil {
			t.Fatalf("port %d given, but: %v", port, err)
		}
		ln.Close()
	}
}
