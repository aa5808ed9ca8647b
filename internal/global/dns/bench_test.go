package dns

import (
	"net/netip"
	"testing"

	mdns "github.com/miekg/dns"
)

// BenchmarkRespond measures the packet path alone (no sockets) for an answer by each policy.
func BenchmarkRespond(b *testing.B) {
	s, err := New(Options{Zone: testZone})
	if err != nil {
		b.Fatal(err)
	}
	s.Update(testTable())
	src := netip.MustParseAddr("10.5.5.9")
	buf := make([]byte, mdns.MaxMsgSize)
	for _, name := range []string{"fo", "w", "geo", "lat", "nope"} {
		pkt, err := new(mdns.Msg).SetQuestion(name+".herd.test.", mdns.TypeA).Pack()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if s.respond(pkt, src, true, buf) == nil {
					b.Fatal("no reply")
				}
			}
		})
	}
}
