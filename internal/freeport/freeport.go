// Package freeport hands tests TCP ports for listeners that bind later, taken below the kernel's
// ephemeral range so that no outgoing connection or port-0 listener can be given one meanwhile.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"testing"
)

// first is the lowest port handed out: below it are the well-known and registered ports that
// services on the host tend to hold.
const first = 10000

// given are the ports handed out in this test binary, so no two listeners of one run share one.
var given sync.Map

// TCP gives a port that binds on every address now (so on 127.0.0.1 and 0.0.0.0 later), taken
// below the kernel's ephemeral range (net.ipv4.ip_local_port_range), never from it. A port from
// that range, free when asked, can be given meanwhile to any socket the kernel picks a port for
// (an outgoing connection, or a port-0 listener of a test package running beside this one), and
// the listener that wanted it then fails to bind for as long as that socket lives.
func TCP(t testing.TB) int {
	t.Helper()
	low := ephemeralLow()
	for range 1000 {
		port := first + rand.IntN(low-first)
		if _, taken := given.LoadOrStore(port, true); taken {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		ln.Close()
		return port
	}
	t.Fatalf("no free TCP port in %d-%d", first, low-1)
	return 0
}

// ephemeralLow is the first port of the kernel's ephemeral range (32768 when it cannot be read).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		var lo, hi int
		if _, err := fmt.Sscan(string(b), &lo, &hi); err == nil && lo > first+1 {
			low = lo
		}
	}
	return low
}
