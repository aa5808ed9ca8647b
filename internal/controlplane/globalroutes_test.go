package controlplane

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/regionnet"
)

// gatewayProvider tells one region's bridge address, as the local provider does.
type gatewayProvider struct {
	provider.Provider
	region string
	addr   netip.Addr
}

func (g gatewayProvider) RegionGateway(region string) (netip.Addr, bool) {
	return g.addr, region == g.region
}

// labNetworks has a network for one region only, whose clients' address is addr.
type labNetworks struct {
	regionnet.Networks
	region string
	addr   netip.Addr
}

func (l labNetworks) DataAddress(_ context.Context, region string) (netip.Addr, bool) {
	return l.addr, region == l.region
}

// A discovery name of a region served by herd up's own load balancer answers the host's address
// on the region's bridge when that load balancer listens on every address, because the loopback
// address clients use is the instance's own; a region of the network lab keeps its load
// balancer's address, and a load balancer on one address is answered there.
func TestInstanceLBAddresses(t *testing.T) {
	fp, err := fake.New(fake.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bridge := netip.MustParseAddr("10.213.7.1")
	providers := map[string]provider.Provider{"local": gatewayProvider{region: "default", addr: bridge}, fake.Name: fp}
	networks := map[string]regionnet.Networks{"local": labNetworks{region: "eu", addr: netip.MustParseAddr("10.250.1.2")}}
	for _, tc := range []struct {
		lbAddress, region, want string
	}{
		{"0.0.0.0", "default", "10.213.7.1"},
		{"0.0.0.0", "eu", "10.250.1.2"},
		{"0.0.0.0", "never-used", "127.0.0.1"},
		{"192.0.2.9", "default", "192.0.2.9"},
		{"127.0.0.1", "default", "127.0.0.1"},
	} {
		lbs := lbAddresses{networks: networks, embedded: embeddedLBAddresses(tc.lbAddress)}
		got, err := newInstanceLBAddresses(lbs, providers, tc.lbAddress).RegionLBAddresses(t.Context(), tc.region)
		if want := []netip.Addr{netip.MustParseAddr(tc.want)}; err != nil || !slices.Equal(got, want) {
			t.Errorf("--lb-address %s, region %s: %v, %v; want %v", tc.lbAddress, tc.region, got, err, want)
		}
	}
}

// The addresses of herd up's own load balancer, for the fleets no region's load balancer serves,
// skip a region's network even where it has one: the host's address on the region's bridge when
// that load balancer listens on every address, else its own.
func TestInstanceLBAddressesEmbedded(t *testing.T) {
	bridge := netip.MustParseAddr("10.213.7.1")
	providers := map[string]provider.Provider{"local": gatewayProvider{region: "eu", addr: bridge}}
	networks := map[string]regionnet.Networks{"local": labNetworks{region: "eu", addr: netip.MustParseAddr("10.250.1.2")}}
	for _, tc := range []struct{ lbAddress, want string }{{"0.0.0.0", "10.213.7.1"}, {"192.0.2.9", "192.0.2.9"}} {
		lbs := lbAddresses{networks: networks, embedded: embeddedLBAddresses(tc.lbAddress)}
		got, err := newInstanceLBAddresses(lbs, providers, tc.lbAddress).embedded().RegionLBAddresses(t.Context(), "eu")
		if want := []netip.Addr{netip.MustParseAddr(tc.want)}; err != nil || !slices.Equal(got, want) {
			t.Errorf("--lb-address %s, herd up's load balancer in region eu: %v, %v; want %v", tc.lbAddress, got, err, want)
		}
	}
}
