package dns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	mdns "github.com/miekg/dns"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/routes"
)

// Callers of the discovery tests: instances of web in eu and us, of batch in eu, each a loopback
// address of its own, so that real clients bound to it ask as that instance would.
var (
	webEU   = netip.MustParseAddr("127.0.10.1")
	webUS   = netip.MustParseAddr("127.0.10.2")
	batchEU = netip.MustParseAddr("127.0.10.3")
	nobody  = netip.MustParseAddr("127.0.10.4")
)

// discoveryTable publishes api (allowFrom web) and open (no allowFrom), in eu and us.
func discoveryTable(euHealthy bool) routes.Table {
	regions := func() []routes.RegionRoute {
		return []routes.RegionRoute{region("eu", euHealthy, euAddr), region("us", true, usAddr)}
	}
	return routes.Table{
		Discovery: []routes.Route{
			{Fleet: "api", Hostname: "api", Policy: v1alpha1.PolicyFailover, TTLSeconds: 5, Regions: regions(), AllowFrom: []string{"web"}},
			{Fleet: "open", Hostname: "open", Policy: v1alpha1.PolicyFailover, TTLSeconds: 5, Regions: regions()},
		},
		Callers: map[netip.Addr]routes.FleetRegion{
			webEU: {Fleet: "web", Region: "eu"}, webUS: {Fleet: "web", Region: "us"}, batchEU: {Fleet: "batch", Region: "eu"},
		},
	}
}

func startDiscovery(t *testing.T, table routes.Table) (*Server, string) {
	t.Helper()
	return serve(t, Options{Zone: v1alpha1.DefaultDiscoveryZone, Discovery: true}, table)
}

// askFrom asks addr with miekg/dns's client, over UDP from the source address given.
func askFrom(t *testing.T, from netip.Addr, addr, name string) *mdns.Msg {
	t.Helper()
	m := new(mdns.Msg)
	m.SetQuestion(name, mdns.TypeA)
	c := &mdns.Client{Net: "udp", Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: from.AsSlice()}}}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("%s from %s: %v", name, from, err)
	}
	return r
}

// A published fleet answers each caller with its own region's load balancer; another region's
// only when the caller's region has no Ready instance; nothing to a fleet allowFrom leaves out.
func TestDiscoveryAnswersByCaller(t *testing.T) {
	s, addr := startDiscovery(t, discoveryTable(true))
	mustAnswer(t, "api from web in eu", askFrom(t, webEU, addr, "api.herd.internal."), euAddr.String())
	mustAnswer(t, "api from web in us", askFrom(t, webUS, addr, "API.herd.internal."), usAddr.String())
	mustAnswer(t, "open from batch in eu", askFrom(t, batchEU, addr, "open.herd.internal."), euAddr.String())
	mustAnswer(t, "open from a non-instance", askFrom(t, nobody, addr, "open.herd.internal."), euAddr.String())
	for _, from := range []netip.Addr{batchEU, nobody} {
		r := askFrom(t, from, addr, "api.herd.internal.")
		if r.Rcode != mdns.RcodeNameError || len(r.Answer) != 0 || !r.Authoritative {
			t.Errorf("api from %s (not in allowFrom): rcode %s answer %v, want an authoritative NXDOMAIN", from, mdns.RcodeToString[r.Rcode], r.Answer)
		}
	}
	if r := askFrom(t, webEU, addr, "nope.herd.internal."); r.Rcode != mdns.RcodeNameError {
		t.Errorf("nope.herd.internal: rcode %s, want NXDOMAIN", mdns.RcodeToString[r.Rcode])
	}

	// eu has no Ready instance of api left: web's instances in eu are sent to us.
	s.Update(discoveryTable(false))
	mustAnswer(t, "api from web in eu, eu unhealthy", askFrom(t, webEU, addr, "api.herd.internal."), usAddr.String())
	mustAnswer(t, "api from web in us, eu unhealthy", askFrom(t, webUS, addr, "api.herd.internal."), usAddr.String())
}

// Go's own resolver, asking from an instance's address, gets the caller's region, and "no such
// host" for a fleet that does not allow it.
func TestDiscoveryGoResolver(t *testing.T) {
	_, addr := startDiscovery(t, discoveryTable(true))
	resolver := func(from netip.Addr) *net.Resolver {
		return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			d := net.Dialer{}
			if network == "udp" {
				d.LocalAddr = &net.UDPAddr{IP: from.AsSlice()}
			} else {
				d.LocalAddr = &net.TCPAddr{IP: from.AsSlice()}
			}
			return d.DialContext(ctx, network, addr)
		}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for from, want := range map[netip.Addr]string{webEU: euAddr.String(), webUS: usAddr.String()} {
		got, err := resolver(from).LookupHost(ctx, "api.herd.internal")
		if err != nil || !slices.Equal(got, []string{want}) {
			t.Errorf("LookupHost(api.herd.internal) from %s = %v, %v; want [%s]", from, got, err, want)
		}
	}
	_, err := resolver(batchEU).LookupHost(ctx, "api.herd.internal")
	var dnsErr *net.DNSError
	if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
		t.Errorf("LookupHost(api.herd.internal) from batch: %v, want not found", err)
	}
}

// A discovery query is told by its source address, not by a client subnet option: batch's
// instance naming web's address in the option still gets NXDOMAIN for api, and web's instance
// naming batch's still gets its answer.
func TestDiscoveryIgnoresClientSubnet(t *testing.T) {
	_, addr := startDiscovery(t, discoveryTable(true))
	ask := func(from, claims netip.Addr) *mdns.Msg {
		m := new(mdns.Msg)
		m.SetQuestion("api.herd.internal.", mdns.TypeA)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &mdns.EDNS0_SUBNET{Code: mdns.EDNS0SUBNET, Family: 1, SourceNetmask: 32, Address: claims.AsSlice()})
		c := &mdns.Client{Net: "udp", Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: from.AsSlice()}}}
		r, _, err := c.Exchange(m, addr)
		if err != nil {
			t.Fatalf("api from %s claiming %s: %v", from, claims, err)
		}
		return r
	}
	if r := ask(batchEU, webEU); r.Rcode != mdns.RcodeNameError || len(r.Answer) != 0 {
		t.Errorf("batch claiming web's address: rcode %s answer %v, want NXDOMAIN", mdns.RcodeToString[r.Rcode], r.Answer)
	}
	mustAnswer(t, "web claiming batch's address", ask(webEU, batchEU), euAddr.String())
}
