// Package dns is herd's authoritative DNS server: for one zone it answers each fleet's
// spec.global hostname with the addresses of the regional load balancers the fleet's policy picks
// (failover, weighted, geo or latency) among the healthy regions, and every region when none is
// healthy (fail open).
//
// Its inputs (routes.Table) arrive whole through Update, which compiles them into an immutable
// snapshot, with every answer already built, and swaps it in atomically: the packet path takes no
// lock and builds no records. UDP is served by a few goroutines each reading and answering in a
// loop (no goroutine per packet), TCP by a goroutine per connection. Every region that leaves or
// joins a hostname's answers is logged and recorded as an event on the fleet.
package dns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mdns "github.com/miekg/dns"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/routes"
)

// EventRecorder records an event about an object ("Fleet/name"); events.Recorder is one.
type EventRecorder interface {
	Eventf(object, typ, reason, format string, args ...any)
}

// Nameserver is one NS record of the zone; Addresses are its glue when the name is in the zone.
type Nameserver struct {
	Name      string
	Addresses []netip.Addr
}

// Options configure a Server.
type Options struct {
	// Zone is the zone served, e.g. "herd.test.". Required.
	Zone string
	// Nameservers are the zone's NS records. Default: "ns1.<zone>" without glue.
	Nameservers []Nameserver
	// MaxUDPSize caps the EDNS0 buffer size honoured over UDP. Default: DefaultMaxUDPSize.
	MaxUDPSize int
	// Logger logs answer changes. Default: discard.
	Logger *slog.Logger
	// Events, when set, records every answer change as an event on the fleet.
	Events EventRecorder
	// Discovery makes the server answer the published fleets (routes.Table.Discovery) as
	// NAME.<zone>, to the instances of other fleets: with the caller's own region while it has a
	// Ready instance, and nothing to a fleet that allowFrom leaves out (discovery.go).
	Discovery bool
}

// Server answers queries for one zone from the latest snapshot.
type Server struct {
	log         *slog.Logger
	events      EventRecorder
	zone        string
	nameservers []Nameserver
	maxUDP      int
	discovery   bool

	snap   atomic.Pointer[snapshot]
	mu     sync.Mutex // serializes Update, so changes are computed against the snapshot they replace
	serial uint32
	last   *routes.Table
}

// New returns a server answering NXDOMAIN for every name of the zone until the first Update.
func New(opts Options) (*Server, error) {
	zone := mdns.Fqdn(strings.ToLower(strings.TrimSpace(opts.Zone)))
	if _, ok := mdns.IsDomainName(zone); !ok || zone == "." {
		return nil, fmt.Errorf("dns zone %q: give a domain name such as \"herd.test.\"", opts.Zone)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxUDPSize == 0 {
		opts.MaxUDPSize = DefaultMaxUDPSize
	}
	if opts.MaxUDPSize < mdns.MinMsgSize || opts.MaxUDPSize > mdns.MaxMsgSize {
		return nil, fmt.Errorf("dns max UDP size %d: must be between 512 and 65535", opts.MaxUDPSize)
	}
	if len(opts.Nameservers) == 0 {
		opts.Nameservers = []Nameserver{{Name: "ns1." + zone}}
	}
	for i := range opts.Nameservers {
		opts.Nameservers[i].Name = mdns.Fqdn(strings.ToLower(opts.Nameservers[i].Name))
	}
	s := &Server{log: opts.Logger, events: opts.Events, zone: zone, nameservers: opts.Nameservers, maxUDP: opts.MaxUDPSize, discovery: opts.Discovery}
	s.serial = uint32(time.Now().Unix())
	s.snap.Store(compile(zone, s.nameservers, routes.Table{}, s.serial, s.discovery))
	return s, nil
}

// Zone is the zone served, fully qualified.
func (s *Server) Zone() string { return s.zone }

// Update makes t what the server answers from, and logs and records as events every region that
// left or joined a hostname's answers. A table equal to the last one changes nothing, not even
// the SOA serial. The server keeps t: the caller must not change it afterwards.
func (s *Server) Update(t routes.Table) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.last != nil && reflect.DeepEqual(*s.last, t) {
		return
	}
	s.last = &t
	// The SOA serial moves with every snapshot, so a secondary (or a person with dig) sees a change.
	s.serial = max(s.serial+1, uint32(time.Now().Unix()))
	next := compile(s.zone, s.nameservers, t, s.serial, s.discovery)
	old := s.snap.Swap(next)
	for _, c := range answerChanges(old, next) {
		s.report(c)
	}
}

func (s *Server) report(c change) {
	object := v1alpha1.KindFleet + "/" + c.fleet
	switch {
	case c.removed:
		s.log.Info("hostname left the zone", "hostname", c.host, "fleet", c.fleet)
		s.event(object, v1alpha1.EventNormal, "DNSHostnameRemoved", "%s left the zone (its fleet or its spec.global is gone): DNS answers NXDOMAIN for it", c.host)
	case c.failOpenChanged && c.failOpen:
		s.log.Warn("no healthy region: answering with every region (fail open)", "hostname", c.host, "fleet", c.fleet)
		s.event(object, v1alpha1.EventWarning, "DNSFailOpen", "no region of %s is healthy: DNS answers with every region (fail open)", c.host)
	case c.failOpenChanged:
		s.log.Info("a region is healthy again: fail open ends", "hostname", c.host, "fleet", c.fleet)
		s.event(object, v1alpha1.EventNormal, "DNSFailOpenEnded", "%s has a healthy region again: DNS answers with healthy regions only", c.host)
	case c.joined:
		s.log.Info("region joined the DNS answers", "hostname", c.host, "fleet", c.fleet, "region", c.region, "why", c.why)
		s.event(object, v1alpha1.EventNormal, "DNSRegionIn", "region %s is in the DNS answers for %s: %s", c.region, c.host, c.why)
	default:
		s.log.Warn("region left the DNS answers", "hostname", c.host, "fleet", c.fleet, "region", c.region, "why", c.why)
		s.event(object, v1alpha1.EventWarning, "DNSRegionOut", "region %s left the DNS answers for %s: %s", c.region, c.host, c.why)
	}
}

func (s *Server) event(object, typ, reason, format string, args ...any) {
	if s.events != nil {
		s.events.Eventf(object, typ, reason, format, args...)
	}
}

// Listener is a UDP socket and a TCP listener on the same address, as DNS needs.
type Listener struct {
	UDP *net.UDPConn
	TCP *net.TCPListener
}

// Addr is the address both listen on.
func (l *Listener) Addr() netip.AddrPort { return l.UDP.LocalAddr().(*net.UDPAddr).AddrPort() }

// Close closes both.
func (l *Listener) Close() error { return errors.Join(l.UDP.Close(), l.TCP.Close()) }

// udpReadBuffer is the UDP socket's receive buffer size asked for.
const udpReadBuffer = 4 << 20

// Listen opens UDP and TCP on addr ("127.0.0.1:5353"; port 0 picks one port free for both).
func Listen(addr string) (*Listener, error) {
	for attempt := 0; ; attempt++ {
		ua, err := net.ResolveUDPAddr("udp", addr)
		if err != nil {
			return nil, fmt.Errorf("dns listen address %q: %w", addr, err)
		}
		u, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, fmt.Errorf("dns listen on udp %s: %w", addr, err)
		}
		// A receive buffer of 4 MiB (as far as net.core.rmem_max allows) holds the queries of a
		// burst or of a few milliseconds without CPU, which the default 208 KiB would drop.
		_ = u.SetReadBuffer(udpReadBuffer)
		port := u.LocalAddr().(*net.UDPAddr).Port
		t, err := net.ListenTCP("tcp", &net.TCPAddr{IP: ua.IP, Port: port, Zone: ua.Zone})
		if err == nil {
			return &Listener{UDP: u, TCP: t}, nil
		}
		u.Close()
		if ua.Port != 0 || attempt == 10 { // a chosen port taken over TCP is the user's to fix
			return nil, fmt.Errorf("dns listen on tcp %s: %w", net.JoinHostPort(ua.IP.String(), fmt.Sprint(port)), err)
		}
	}
}

// Serve answers on l until ctx is done, then closes l.
func (s *Server) Serve(ctx context.Context, l *Listener) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	readers := max(2, runtime.GOMAXPROCS(0))
	for range readers {
		wg.Go(func() { s.serveUDP(l.UDP) })
	}
	wg.Go(func() { s.serveTCP(ctx, l.TCP, &wg) })
	wg.Wait()
	return nil
}

// tcpIdle is how long a TCP connection may wait for its next query (RFC 7766 suggests seconds).
const tcpIdle = 10 * time.Second

func (s *Server) serveTCP(ctx context.Context, l *net.TCPListener, wg *sync.WaitGroup) {
	for {
		conn, err := l.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			continue
		}
		wg.Go(func() {
			defer conn.Close()
			stop := context.AfterFunc(ctx, func() { conn.Close() })
			defer stop()
			s.serveConn(conn)
		})
	}
}

// serveConn answers the queries of one TCP connection, each framed by a two-byte length.
func (s *Server) serveConn(conn *net.TCPConn) {
	from := conn.RemoteAddr().(*net.TCPAddr).AddrPort().Addr()
	in := make([]byte, mdns.MaxMsgSize)
	out := make([]byte, mdns.MaxMsgSize)
	var frame [2]byte
	for {
		_ = conn.SetReadDeadline(time.Now().Add(tcpIdle))
		if _, err := io.ReadFull(conn, in[:2]); err != nil {
			return
		}
		n := int(in[0])<<8 | int(in[1])
		if _, err := io.ReadFull(conn, in[:n]); err != nil {
			return
		}
		reply := s.respond(in[:n], from, false, out)
		if reply == nil {
			return // not a query: nothing sensible follows on this stream
		}
		frame[0], frame[1] = byte(len(reply)>>8), byte(len(reply))
		_ = conn.SetWriteDeadline(time.Now().Add(tcpIdle))
		bufs := net.Buffers{frame[:], reply}
		if _, err := bufs.WriteTo(conn); err != nil {
			return
		}
	}
}
