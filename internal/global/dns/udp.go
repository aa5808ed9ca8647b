package dns

import (
	"errors"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Batched UDP: each reader takes up to udpBatch queries per recvmmsg and sends their replies with
// one sendmmsg, so that under load the system calls, not the answers, stop being most of a
// query's cost. When queries come one at a time a batch is one query, as before.
const (
	udpBatch = 32
	// udpQueryMax is the largest query read; a bigger datagram (MSG_TRUNC) is not a DNS query
	// anyone sends and is dropped.
	udpQueryMax = 4096
)

// batchConn is what x/net's ipv4 and ipv6 packet conns offer: recvmmsg and sendmmsg where the
// platform has them, a message at a time elsewhere.
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

func newBatchConn(conn *net.UDPConn) batchConn {
	if a, ok := conn.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() != nil {
		return ipv4.NewPacketConn(conn)
	}
	return ipv6.NewPacketConn(conn)
}

func (s *Server) serveUDP(conn *net.UDPConn) {
	bc := newBatchConn(conn)
	in := make([]ipv4.Message, udpBatch)
	inBuf := make([]byte, udpBatch*udpQueryMax)
	for i := range in {
		in[i].Buffers = [][]byte{inBuf[i*udpQueryMax : (i+1)*udpQueryMax]}
	}
	// Reply buffers of the full UDP limit: PackBuffer packs in place when len(buf) suffices.
	replySize := max(s.maxUDP, udpQueryMax)
	outBuf := make([]byte, udpBatch*replySize)
	out := make([]ipv4.Message, udpBatch)
	for i := range out {
		out[i].Buffers = make([][]byte, 1)
	}
	for {
		n, err := bc.ReadBatch(in, 0)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // a transient error (ICMP unreachable from a previous reply) ends nothing
		}
		replies := 0
		for i := range n {
			m := &in[i]
			from, ok := m.Addr.(*net.UDPAddr)
			if !ok || m.Flags&syscall.MSG_TRUNC != 0 {
				continue
			}
			src, _ := netip.AddrFromSlice(from.IP)
			buf := outBuf[replies*replySize : (replies+1)*replySize]
			if reply := s.respond(m.Buffers[0][:m.N], src, true, buf); reply != nil {
				out[replies].Buffers[0], out[replies].Addr = reply, m.Addr
				replies++
			}
		}
		for sent := 0; sent < replies; {
			k, err := bc.WriteBatch(out[sent:replies], 0)
			if err != nil {
				if errors.Is(err, net.ErrClosed) {
					return
				}
				sent++ // skip the reply the kernel refused (its client's socket is gone)
				continue
			}
			sent += k
		}
	}
}
