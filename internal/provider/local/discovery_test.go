package local

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// An instance is told herd's discovery DNS at its own gateway when the DNS listens on every
// address, at the address given otherwise, and nothing while none is served; a loopback
// address, which no instance reaches, is refused.
func TestDiscoveryFlags(t *testing.T) {
	p := &Provider{}
	if got := p.discoveryFlags("10.213.1.1"); got != nil {
		t.Errorf("without discovery DNS: flags %v, want none", got)
	}
	if err := p.SetDiscoveryDNS(DiscoveryDNS{Zone: "herd.internal.", Listen: netip.MustParseAddrPort("127.0.0.1:5354")}); err == nil || !strings.Contains(err.Error(), "--discovery-listen") {
		t.Errorf("loopback: error %v, want one naming --discovery-listen", err)
	}
	if err := p.SetDiscoveryDNS(DiscoveryDNS{Zone: "herd.internal.", Listen: netip.MustParseAddrPort("0.0.0.0:5354")}); err != nil {
		t.Fatal(err)
	}
	want := []string{"--discovery-zone", "herd.internal.", "--discovery-dns", "10.213.2.1:5354"}
	if got := p.discoveryFlags("10.213.2.1"); !slices.Equal(got, want) {
		t.Errorf("every address: flags %v, want %v", got, want)
	}
	if err := p.SetDiscoveryDNS(DiscoveryDNS{Zone: "corp.", Listen: netip.MustParseAddrPort("192.0.2.7:53")}); err != nil {
		t.Fatal(err)
	}
	want = []string{"--discovery-zone", "corp.", "--discovery-dns", "192.0.2.7:53"}
	if got := p.discoveryFlags("10.213.2.1"); !slices.Equal(got, want) {
		t.Errorf("one address: flags %v, want %v", got, want)
	}
}

// A region's gateway is the first host of the subnet it keeps, and none is told for a region
// that was never given one.
func TestRegionGateway(t *testing.T) {
	p := &Provider{dir: t.TempDir()}
	if a, ok := p.RegionGateway("default"); ok {
		t.Errorf("a region without a subnet: gateway %s, want none", a)
	}
	if err := writeRegion(p.regionsDir(), &regionRecord{Region: "default", Subnet: "10.213.7.0/24", Bridge: "herdbr-x"}); err != nil {
		t.Fatal(err)
	}
	if a, ok := p.RegionGateway("default"); !ok || a != netip.MustParseAddr("10.213.7.1") {
		t.Errorf("gateway %s, %v; want 10.213.7.1", a, ok)
	}
}
