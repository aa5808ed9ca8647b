package e2e

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// givenPorts are the ports freePort has handed out in this test binary, so no two listeners of
// one run are given the same.
var givenPorts sync.Map

// freePort gives a loopback port for a listener herd up binds later. It is taken below the
// kernel's ephemeral range (net.ipv4.ip_local_port_range), never from it: a port from the range,
// free when asked, can be given meanwhile to any socket the kernel picks a port for (an outgoing
// connection, or a listener on port 0 of a test package running beside this one), and herd up's
// listener then fails to bind for as long as that socket lives.
func freePort(t *testing.T) int {
	t.Helper()
	low := ephemeralLow()
	const first = 10000
	for range 1000 {
		port := first + rand.IntN(low-first)
		if _, taken := givenPorts.LoadOrStore(port, true); taken {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		return port
	}
	t.Fatalf("no free port in %d-%d on 127.0.0.1", first, low-1)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when it cannot be read).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > 10001 {
			low = lo
		}
	}
	return low
}

func TestFreePortIsOutsideTheEphemeralRange(t *testing.T) {
	low := ephemeralLow()
	seen := map[int]bool{}
	for range 50 {
		port := freePort(t)
		if port >= low || seen[port] {
			t.Fatalf("freePort gave %d: want a port below %d, not given before", port, low)
		}
		seen[port] = true
	}
}
