package lb

import (
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// This file measures how far the load balancer's clients are: the kernel's smoothed round-trip time
// (TCP_INFO) of the connections it serves, averaged per client network (/24 for IPv4, /48 for IPv6).
// It is what a latency-based DNS policy needs: the round trip from each client network to each
// region, measured on the fleet's own traffic instead of a provider's latency tables.
//
// A connection is sampled once after its first request, again at most every rttResample while it
// lives, and at close if it never was (TCP listeners, connections that carried no request): one
// getsockopt per connection, nothing per request.

const (
	// DefaultClientNetworks bounds the client networks remembered by default.
	DefaultClientNetworks = 4096
	// rttResample is how often a long-lived client connection is sampled again.
	rttResample = 30 * time.Second
	// rttWeight is the weight of a new sample in a network's moving average (as TCP's own 1/8 would
	// be too slow for connections that each carry an already smoothed figure).
	rttWeight = 0.2
	// ipv4NetworkBits and ipv6NetworkBits are the client networks' sizes: the /24 and /48 that
	// EDNS Client Subnet and resolvers conventionally use.
	ipv4NetworkBits = 24
	ipv6NetworkBits = 48
)

// NetworkRTT is the round-trip time from the load balancer to one client network.
type NetworkRTT struct {
	// Network is the client network: the client's address masked to /24 (IPv4) or /48 (IPv6).
	Network netip.Prefix
	// SRTT is the moving average of the kernel's smoothed RTT of the network's connections.
	SRTT time.Duration
	// Samples is how many connections were sampled.
	Samples uint64
	// LastSeen is when the last sample was taken.
	LastSeen time.Time
}

// networkRTTJSON is NetworkRTT on the admin API: {"network", "srtt_ms", "samples", "last_seen"}.
type networkRTTJSON struct {
	Network  netip.Prefix `json:"network"`
	SRTTms   float64      `json:"srtt_ms"`
	Samples  uint64       `json:"samples"`
	LastSeen time.Time    `json:"last_seen"`
}

// MarshalJSON writes the RTT in milliseconds, to the microsecond.
func (n NetworkRTT) MarshalJSON() ([]byte, error) {
	ms := math.Round(float64(n.SRTT)/float64(time.Microsecond)) / 1000
	return json.Marshal(networkRTTJSON{Network: n.Network, SRTTms: ms, Samples: n.Samples, LastSeen: n.LastSeen})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (n *NetworkRTT) UnmarshalJSON(b []byte) error {
	var j networkRTTJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	if !j.Network.IsValid() {
		return fmt.Errorf("network: required, a CIDR prefix such as 10.1.2.0/24")
	}
	if j.SRTTms < 0 || math.IsNaN(j.SRTTms) || j.SRTTms > float64(time.Hour/time.Millisecond) {
		return fmt.Errorf("srtt_ms: %v is not a round trip in milliseconds", j.SRTTms)
	}
	*n = NetworkRTT{Network: j.Network, SRTT: time.Duration(j.SRTTms * float64(time.Millisecond)),
		Samples: j.Samples, LastSeen: j.LastSeen}
	return nil
}

// clientNetwork returns the client network of addr: /24 for IPv4 (and IPv4-mapped IPv6), /48 for IPv6.
func clientNetwork(addr netip.Addr) (netip.Prefix, bool) {
	addr = addr.Unmap()
	bits := ipv6NetworkBits
	if addr.Is4() {
		bits = ipv4NetworkBits
	}
	p, err := addr.WithZone("").Prefix(bits)
	return p, err == nil && p.IsValid()
}

// rttEntry is one network's average; it is changed under rttTable.mu only.
type rttEntry struct {
	srtt     time.Duration
	samples  uint64
	lastSeen time.Time
}

// rttTable is the bounded table of client networks: when it is full, the network sampled least
// recently is forgotten.
type rttTable struct {
	mu   sync.Mutex
	nets *simplelru.LRU[netip.Prefix, *rttEntry]

	// A histogram of every sample, for Prometheus (LatencyBuckets).
	hist    [16]atomic.Uint64
	histSum atomic.Uint64 // nanoseconds
	now     func() time.Time
}

func newRTTTable(size int) *rttTable {
	if size <= 0 {
		size = DefaultClientNetworks
	}
	nets, _ := simplelru.NewLRU[netip.Prefix, *rttEntry](size, nil) // fails only on size <= 0
	return &rttTable{nets: nets, now: time.Now}
}

// add folds one sample from a client at addr into its network's average.
func (r *rttTable) add(addr netip.Addr, rtt time.Duration) {
	network, ok := clientNetwork(addr)
	if !ok || rtt <= 0 {
		return
	}
	now := r.now()
	r.mu.Lock()
	e, ok := r.nets.Get(network)
	if !ok {
		e = &rttEntry{srtt: rtt}
		r.nets.Add(network, e)
	} else {
		e.srtt += time.Duration(rttWeight * float64(rtt-e.srtt))
	}
	e.samples++
	e.lastSeen = now
	r.mu.Unlock()

	i := 0
	for i < len(latencyBucketNanos) && int64(rtt) > latencyBucketNanos[i] {
		i++
	}
	r.hist[i].Add(1)
	r.histSum.Add(uint64(rtt))
}

// list returns every network, sorted by network.
func (r *rttTable) list() []NetworkRTT {
	r.mu.Lock()
	out := make([]NetworkRTT, 0, r.nets.Len())
	for _, k := range r.nets.Keys() {
		e, _ := r.nets.Peek(k)
		out = append(out, NetworkRTT{Network: k, SRTT: e.srtt, Samples: e.samples, LastSeen: e.lastSeen})
	}
	r.mu.Unlock()
	slices.SortFunc(out, func(a, b NetworkRTT) int {
		if c := a.Network.Addr().Compare(b.Network.Addr()); c != 0 {
			return c
		}
		return a.Network.Bits() - b.Network.Bits()
	})
	return out
}

func (r *rttTable) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nets.Len()
}

// sampleConn takes one sample of a client connection, if the kernel has an estimate for it.
func (r *rttTable) sampleConn(c net.Conn) {
	rtt, ok := socketRTT(c)
	if !ok {
		return
	}
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		r.add(a.AddrPort().Addr(), rtt)
	}
}

// ClientRTTs returns the round-trip time to every client network the load balancer served recently,
// sorted by network (at most Options.ClientNetworks of them; the least recently sampled are forgotten
// first).
func (lb *LB) ClientRTTs() []NetworkRTT { return lb.rtt.list() }
