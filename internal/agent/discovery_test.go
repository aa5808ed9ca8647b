package agent

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/agent/distro"
)

// With discovery, an image with cluster DNS forwards the zone to herd's DNS at the address given,
// caching no longer than the TTL; an image without cluster DNS, or an agent without discovery,
// forwards nothing.
func TestStubZones(t *testing.T) {
	d := &Discovery{Zone: "herd.internal", Server: netip.MustParseAddrPort("10.213.1.1:5354")}
	got := stubZones(d, true)
	want := []distro.StubZone{{Zone: "herd.internal", Server: d.Server, Cache: 5 * time.Second}}
	if !slices.Equal(got, want) {
		t.Errorf("stub zones %v, want %v", got, want)
	}
	if got := stubZones(d, false); got != nil {
		t.Errorf("an image without cluster DNS got stub zones %v", got)
	}
	if got := stubZones(nil, true); got != nil {
		t.Errorf("an agent without discovery got stub zones %v", got)
	}
}

// A bad zone or server is refused at start, naming the flag.
func TestDiscoveryCheck(t *testing.T) {
	for _, c := range []struct {
		d    Discovery
		flag string
	}{
		{Discovery{Zone: "herd..internal", Server: netip.MustParseAddrPort("10.0.0.1:53")}, "--discovery-zone"},
		{Discovery{Zone: "herd.internal."}, "--discovery-dns"},
		{Discovery{Zone: "herd.internal.", Server: netip.MustParseAddrPort("0.0.0.0:5354")}, "--discovery-dns"},
	} {
		if err := c.d.check(); err == nil || !strings.Contains(err.Error(), c.flag) {
			t.Errorf("%+v: error %v, want one naming %s", c.d, err, c.flag)
		}
	}
	if err := (Discovery{Zone: "herd.internal.", Server: netip.MustParseAddrPort("10.213.0.1:5354")}).check(); err != nil {
		t.Errorf("a good config: %v", err)
	}
}
