package hostnet

import (
	"net/netip"
	"testing"
)

func TestPickSubnet(t *testing.T) {
	pool := netip.MustParsePrefix("10.213.0.0/16")
	p := netip.MustParsePrefix
	tests := []struct {
		name        string
		taken, host []netip.Prefix
		want        string
		wantErr     bool
	}{
		{name: "first", want: "10.213.0.0/24"},
		{name: "skips regions", taken: []netip.Prefix{p("10.213.0.0/24"), p("10.213.1.0/24")}, want: "10.213.2.0/24"},
		{name: "skips host addresses", host: []netip.Prefix{p("10.213.0.0/23")}, want: "10.213.2.0/24"},
		{name: "a wide host route covers all", host: []netip.Prefix{p("10.0.0.0/8")}, wantErr: true},
		{name: "unrelated host address", host: []netip.Prefix{p("192.168.1.0/24"), p("127.0.0.0/8")}, want: "10.213.0.0/24"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := PickSubnet(pool, tc.taken, tc.host)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("PickSubnet = %s, want an error", got)
				}
				return
			}
			if err != nil || got.String() != tc.want {
				t.Fatalf("PickSubnet = %s, %v; want %s", got, err, tc.want)
			}
		})
	}
	if _, err := PickSubnet(p("10.0.0.0/25"), nil, nil); err == nil {
		t.Error("a pool smaller than a /24 was accepted")
	}
	if got, _ := PickSubnet(p("10.1.2.3/24"), nil, nil); got.String() != "10.1.2.0/24" {
		t.Errorf("a /24 pool gives %s", got)
	}
	if got := HostAddr(netip.MustParsePrefix("10.213.7.0/24"), 1); got.String() != "10.213.7.1" {
		t.Errorf("HostAddr = %s", got)
	}
}
