package dns

import (
	"net/netip"
	"strings"

	mdns "github.com/miekg/dns"
)

// TTLs of the zone's own records, and the negative-caching TTL (SOA minimum, RFC 2308): short,
// like the answers, so that a hostname added to the zone resolves soon.
const (
	soaTTL      = 60
	nsTTL       = 3600
	negativeTTL = 5
)

// DefaultMaxUDPSize caps the EDNS0 buffer size a client may ask for: 1232 bytes fit every path's
// MTU without fragmentation (the DNS Flag Day 2020 value); bigger answers go over TCP.
const DefaultMaxUDPSize = 1232

// respond answers one query packet: req is the packet, src the resolver's address, udp set
// over UDP, where a reply is held to the client's EDNS0 buffer size. It returns the packed reply,
// in buf when it fits (PackBuffer packs in place when len(buf) suffices), or nil when the packet deserves none (too short for a header, or itself a
// reply). It never panics on any input, which FuzzRespond checks.
func (s *Server) respond(req []byte, src netip.Addr, udp bool, buf []byte) []byte {
	if len(req) < 12 || req[2]&0x80 != 0 { // no header, or QR set: never answer an answer
		return nil
	}
	var q mdns.Msg
	if err := q.Unpack(req); err != nil {
		return formErr(req, buf)
	}
	r := &mdns.Msg{}
	r.Id, r.Response, r.Opcode, r.RecursionDesired = q.Id, true, q.Opcode, q.RecursionDesired
	r.Question = q.Question
	maxSize := mdns.MaxMsgSize
	if udp {
		maxSize = mdns.MinMsgSize
	}
	opt, optErr := singleOPT(&q)
	var ecs *mdns.EDNS0_SUBNET
	c := client{addr: src.Unmap(), bits: src.Unmap().BitLen()}
	if opt != nil {
		if udp {
			maxSize = min(max(int(opt.UDPSize()), mdns.MinMsgSize), s.maxUDP)
		}
		ropt := &mdns.OPT{Hdr: mdns.RR_Header{Name: ".", Rrtype: mdns.TypeOPT}}
		ropt.SetUDPSize(uint16(s.maxUDP))
		r.Extra = []mdns.RR{ropt}
		for _, o := range opt.Option {
			if e, ok := o.(*mdns.EDNS0_SUBNET); ok && ecs == nil {
				ecs = e
			}
		}
		if ecs != nil {
			if ec, ok := ecsClient(ecs); !ok {
				optErr = true
			} else {
				echo := &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, Family: ecs.Family, SourceNetmask: ecs.SourceNetmask, Address: ecs.Address}
				ropt.Option = []mdns.EDNS0{echo}
				ecs = echo
				if s.discovery {
					// A discovery caller is told by the address its query comes from: a subnet
					// option could name another fleet's instance and get a name allowFrom denies
					// it. The echo keeps scope 0: the answer holds for no subnet.
					ecs = nil
				} else {
					c = ec
				}
			}
		}
		if !optErr && opt.Version() != 0 {
			r.Rcode = mdns.RcodeBadVers
			return pack(r, maxSize, buf)
		}
	}
	switch {
	case optErr || len(q.Question) != 1:
		r.Rcode = mdns.RcodeFormatError
		if ecs != nil && optErr {
			r.Extra[0].(*mdns.OPT).Option = nil
		}
	case q.Opcode != mdns.OpcodeQuery:
		r.Rcode = mdns.RcodeNotImplemented
	default:
		scope := s.answer(r, q.Question[0], c)
		if ecs != nil {
			ecs.SourceScope = uint8(min(scope, int(ecs.SourceNetmask)))
		}
	}
	return pack(r, maxSize, buf)
}

// answer fills r for question qn from the current snapshot and returns the ECS scope the answer
// holds for.
func (s *Server) answer(r *mdns.Msg, qn mdns.Question, c client) int {
	snap := s.snap.Load()
	name := strings.ToLower(qn.Name)
	if (qn.Qclass != mdns.ClassINET && qn.Qclass != mdns.ClassANY) || !mdns.IsSubDomain(snap.zone, name) {
		r.Rcode = mdns.RcodeRefused // not ours: an authoritative server gives no referral upwards
		return 0
	}
	r.Authoritative = true
	if name == snap.zone {
		switch qn.Qtype {
		case mdns.TypeSOA, mdns.TypeANY: // ANY: one RRset is a full answer (RFC 8482)
			r.Answer = snap.soa
		case mdns.TypeNS:
			r.Answer = snap.ns
			for _, ns := range snap.ns {
				if g := snap.glue[ns.(*mdns.NS).Ns]; g != nil {
					r.Extra = append(r.Extra, g.allA...)
					r.Extra = append(r.Extra, g.allAAAA...)
				}
			}
		default:
			r.Ns = snap.soa
		}
		return 0
	}
	h := snap.hosts[name]
	if h == nil {
		h = snap.glue[name]
	}
	if h == nil || !snap.allowed(h, c) {
		if h != nil || !snap.ents[name] {
			r.Rcode = mdns.RcodeNameError
		}
		r.Ns = snap.soa
		return 0
	}
	i, scope := h.pick(snap, c)
	switch qn.Qtype {
	case mdns.TypeA:
		r.Answer = h.rrset(i, h.a, h.allA)
	case mdns.TypeAAAA:
		r.Answer = h.rrset(i, h.aaaa, h.allAAAA)
	case mdns.TypeANY:
		if r.Answer = h.rrset(i, h.a, h.allA); len(r.Answer) == 0 {
			r.Answer = h.rrset(i, h.aaaa, h.allAAAA)
		}
	}
	if len(r.Answer) == 0 {
		r.Ns = snap.soa // NODATA: the name exists, not with this type
	}
	return scope
}

func (h *host) rrset(i int, per [][]mdns.RR, all []mdns.RR) []mdns.RR {
	if i < 0 {
		return all
	}
	return per[i]
}

// singleOPT returns the query's OPT record; bad is set when there are several (RFC 6891: FORMERR).
func singleOPT(q *mdns.Msg) (opt *mdns.OPT, bad bool) {
	for _, rr := range q.Extra {
		if o, ok := rr.(*mdns.OPT); ok {
			if opt != nil {
				return opt, true
			}
			opt = o
		}
	}
	return opt, false
}

// ecsClient reads an EDNS Client Subnet option; ok is false when it is malformed (RFC 7871 7.1:
// a source prefix longer than the family's addresses, or a non-zero scope in a query).
func ecsClient(e *mdns.EDNS0_SUBNET) (client, bool) {
	var addr netip.Addr
	switch e.Family {
	case 1:
		a, ok := netip.AddrFromSlice(e.Address.To4())
		if !ok || e.SourceNetmask > 32 {
			return client{}, false
		}
		addr = a
	case 2:
		a, ok := netip.AddrFromSlice(e.Address.To16())
		if !ok || e.SourceNetmask > 128 {
			return client{}, false
		}
		addr = a
	default:
		return client{}, false
	}
	if e.SourceScope != 0 {
		return client{}, false
	}
	p, err := addr.Prefix(int(e.SourceNetmask))
	if err != nil {
		return client{}, false
	}
	return client{addr: p.Addr(), bits: p.Bits()}, true
}

// pack packs r into buf, truncating it (TC set, records dropped, OPT kept) when it exceeds maxSize
// so that the resolver retries over TCP.
func pack(r *mdns.Msg, maxSize int, buf []byte) []byte {
	r.Compress = true
	out, err := r.PackBuffer(buf)
	if err != nil {
		r.Answer, r.Ns, r.Extra = nil, nil, nil
		r.Rcode = mdns.RcodeServerFailure
		if out, err = r.PackBuffer(buf); err != nil {
			return nil
		}
	}
	if len(out) <= maxSize {
		return out
	}
	r.Truncate(maxSize)
	out, err = r.PackBuffer(buf)
	if err != nil {
		return nil
	}
	return out
}

// formErr answers a packet whose header reads but whose body does not: the header's id and
// opcode, FORMERR, no sections.
func formErr(req, buf []byte) []byte {
	out := append(buf[:0], req[:12]...)
	out[2] = 0x80 | req[2]&0x79 // QR, the query's opcode and RD
	out[3] = mdns.RcodeFormatError
	clear(out[4:12])
	return out
}
