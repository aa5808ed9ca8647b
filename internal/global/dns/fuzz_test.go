package dns

import (
	"encoding/binary"
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"
)

// FuzzRespond feeds arbitrary bytes to the packet path: it must never panic, and must either stay
// silent (no header, or a reply) or send a well-formed reply to the same id that fits the UDP
// limit.
func FuzzRespond(f *testing.F) {
	seed := func(m *mdns.Msg) {
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, true)
		f.Add(b, false)
	}
	q := func(name string, qtype uint16) *mdns.Msg { return new(mdns.Msg).SetQuestion(name, qtype) }
	seed(q("fo.herd.test.", mdns.TypeA))
	seed(q("big.herd.test.", mdns.TypeA))
	seed(q("herd.test.", mdns.TypeANY))
	seed(q("w.herd.test.", mdns.TypeANY).SetEdns0(65535, true))
	seed(q("example.com.", mdns.TypeA))
	m := q("geo.herd.test.", mdns.TypeA)
	ecs("10.1.2.0/24")(m)
	seed(m)
	m = q("lat.herd.test.", mdns.TypeAAAA).SetEdns0(4096, false)
	m.IsEdns0().SetVersion(3)
	seed(m)
	m = q("fo.herd.test.", mdns.TypeA)
	m.Question = append(m.Question, m.Question[0]) // two questions
	seed(m)
	valid, _ := q("fo.herd.test.", mdns.TypeA).Pack()
	f.Add(valid[:len(valid)-3], true) // cut short
	bad := append([]byte(nil), valid...)
	binary.BigEndian.PutUint16(bad[4:], 9) // QDCOUNT 9, one question present
	f.Add(bad, true)
	loop := append([]byte(nil), valid[:12]...)
	loop = append(loop, 0xc0, 12, 0, 1, 0, 1) // a compression pointer to itself
	f.Add(loop, true)
	f.Add([]byte{}, true)
	f.Add([]byte{0, 1, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true) // a reply

	s, err := New(Options{Zone: testZone})
	if err != nil {
		f.Fatal(err)
	}
	s.Update(testTable())
	src := netip.MustParseAddr("192.0.2.1")
	buf := make([]byte, mdns.MaxMsgSize)
	f.Fuzz(func(t *testing.T, pkt []byte, udp bool) {
		out := s.respond(pkt, src, udp, buf)
		if out == nil {
			if len(pkt) >= 12 && pkt[2]&0x80 == 0 {
				var m mdns.Msg
				if m.Unpack(pkt) == nil {
					t.Fatalf("no reply to a well-formed query %v", m.Question)
				}
			}
			return
		}
		if udp && len(out) > DefaultMaxUDPSize {
			t.Fatalf("UDP reply of %d bytes, more than %d", len(out), DefaultMaxUDPSize)
		}
		if len(out) < 12 || binary.BigEndian.Uint16(out) != binary.BigEndian.Uint16(pkt) || out[2]&0x80 == 0 {
			t.Fatalf("reply header % x to query header % x", out[:min(12, len(out))], pkt[:12])
		}
		var r mdns.Msg
		if err := r.Unpack(out); err != nil {
			t.Fatalf("reply does not unpack: %v", err)
		}
	})
}
