package lb

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/lb/lbtest"
)

func TestClientNetwork(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"10.216.0.7", "10.216.0.0/24"},
		{"192.0.2.255", "192.0.2.0/24"},
		{"::ffff:198.51.100.9", "198.51.100.0/24"},
		{"2001:db8:abcd:12::1", "2001:db8:abcd::/48"},
		{"fe80::1%eth0", "fe80::/48"},
	} {
		got, ok := clientNetwork(netip.MustParseAddr(tc.addr))
		if !ok || got.String() != tc.want {
			t.Errorf("clientNetwork(%s) = %s, %v; want %s", tc.addr, got, ok, tc.want)
		}
	}
	if _, ok := clientNetwork(netip.Addr{}); ok {
		t.Errorf("the zero address has a network")
	}
}

func TestRTTTableAverageAndEviction(t *testing.T) {
	r := newRTTTable(2)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r.now = func() time.Time { return now }
	a, b, c := netip.MustParseAddr("10.0.1.5"), netip.MustParseAddr("10.0.2.5"), netip.MustParseAddr("10.0.3.5")

	r.add(a, 10*time.Millisecond)
	r.add(netip.MustParseAddr("10.0.1.200"), 20*time.Millisecond) // same /24
	r.add(b, 50*time.Millisecond)
	r.add(b, -time.Millisecond) // no estimate: ignored
	got := r.list()
	if len(got) != 2 {
		t.Fatalf("networks %+v, want 2", got)
	}
	// 10ms, then 20% of the way to 20ms.
	if got[0].Network.String() != "10.0.1.0/24" || got[0].SRTT != 12*time.Millisecond || got[0].Samples != 2 {
		t.Errorf("first network %+v, want 10.0.1.0/24 at 12ms over 2 samples", got[0])
	}
	if got[1].Network.String() != "10.0.2.0/24" || got[1].SRTT != 50*time.Millisecond || got[1].Samples != 1 || !got[1].LastSeen.Equal(now) {
		t.Errorf("second network %+v, want 10.0.2.0/24 at 50ms, 1 sample, seen %s", got[1], now)
	}

	// a is sampled again, so b is now the least recently sampled and goes when c comes.
	now = now.Add(time.Minute)
	r.add(a, 12*time.Millisecond)
	r.add(c, 30*time.Millisecond)
	got = r.list()
	if len(got) != 2 || got[0].Network.String() != "10.0.1.0/24" || got[1].Network.String() != "10.0.3.0/24" {
		t.Fatalf("after a third network: %+v, want 10.0.1.0/24 and 10.0.3.0/24 (10.0.2.0/24 evicted)", got)
	}
	if got[0].Samples != 3 || !got[0].LastSeen.Equal(now) {
		t.Errorf("10.0.1.0/24: %+v, want 3 samples, last seen %s", got[0], now)
	}
	var n uint64
	for i := range r.hist {
		n += r.hist[i].Load()
	}
	if n != 5 {
		t.Errorf("histogram counts %d samples, want 5", n)
	}
}

func TestNetworkRTTJSON(t *testing.T) {
	in := NetworkRTT{Network: netip.MustParsePrefix("10.216.0.0/24"), SRTT: 10456 * time.Microsecond, Samples: 7,
		LastSeen: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"network":"10.216.0.0/24","srtt_ms":10.456,"samples":7,"last_seen":"2030-01-02T03:04:05Z"}`
	if string(data) != want {
		t.Errorf("JSON %s, want %s", data, want)
	}
	var out NetworkRTT
	if err := json.Unmarshal(data, &out); err != nil || out != in {
		t.Errorf("round trip: %+v, %v; want %+v", out, err, in)
	}
	for _, bad := range []string{`{"srtt_ms":1}`, `{"network":"10.0.0.0/24","srtt_ms":-1}`, `{"network":"nope"}`} {
		if err := json.Unmarshal([]byte(bad), &out); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

// TestClientRTTsFromRealConnections: requests over real loopback connections leave the client's
// network, 127.0.0.0/24, in the table and on the admin API, with the kernel's round-trip time.
func TestClientRTTsFromRealConnections(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_INFO is read on Linux only")
	}
	forEachEngine(t, func(t *testing.T, e Engine) {
		b := newBackend(t, "b0", nil)
		lb := startLB(t, e, Config{Listeners: []Listener{httpListener(TargetGroup{Name: "v1", Targets: targets(b)})}})
		waitHealthy(t, lb, 1)
		c := newClient()
		for range 5 {
			if code, _, _ := get(t, c, url(lb, "/")); code != http.StatusOK {
				t.Fatalf("GET: %d", code)
			}
		}
		// A kept-alive connection is sampled once after its first request, not per request.
		waitFor(t, 5*time.Second, "a sample of the client's connection", func() bool { return len(lb.ClientRTTs()) == 1 })
		got := lb.ClientRTTs()[0]
		if got.Network.String() != "127.0.0.0/24" || got.SRTT <= 0 || got.SRTT > 100*time.Millisecond || got.Samples != 1 {
			t.Errorf("client network %+v, want 127.0.0.0/24 with one sample of a loopback round trip", got)
		}
		// Closing the connection does not sample it again; a new connection is sampled.
		c.CloseIdleConnections()
		c2 := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		if code, _, _ := get(t, c2, url(lb, "/")); code != http.StatusOK {
			t.Fatalf("GET: %d", code)
		}
		waitFor(t, 5*time.Second, "a second sample", func() bool { return lb.ClientRTTs()[0].Samples == 2 })

		h, err := NewAdminHandler(lb, "secret", nil)
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, "/rtt", nil)
		req.Header.Set("Authorization", "Bearer secret")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		var list []NetworkRTT
		if err := json.Unmarshal(rec.Body.Bytes(), &list); rec.Code != http.StatusOK || err != nil || len(list) != 1 ||
			list[0].Network.String() != "127.0.0.0/24" || list[0].SRTT <= 0 {
			t.Errorf("GET /rtt: %d %s (%v)", rec.Code, rec.Body, err)
		}
		if !strings.Contains(rec.Body.String(), `"srtt_ms"`) {
			t.Errorf("GET /rtt lacks srtt_ms: %s", rec.Body)
		}
	})
}

// TestClientRTTsOfTCPListener: a TCP listener's connections are sampled when they end.
func TestClientRTTsOfTCPListener(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_INFO is read on Linux only")
	}
	echo := lbtest.EchoServer(t)
	lb := startLB(t, EngineFast, Config{Listeners: []Listener{{Name: "db/tcp", Fleet: "db", Address: "127.0.0.1:0", Protocol: ProtocolTCP,
		HealthCheck: HealthCheck{Interval: Duration(100 * time.Millisecond)},
		Groups:      []TargetGroup{{Name: "v1", Targets: []Target{{ID: "echo", Address: echo}}}}}}})
	waitHealthy(t, lb, 1)
	c, err := net.Dial("tcp", lb.Addr("db/tcp").String())
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil {
		t.Fatal(err)
	}
	if len(lb.ClientRTTs()) != 0 {
		t.Errorf("a TCP connection was sampled before it ended")
	}
	c.Close()
	waitFor(t, 5*time.Second, "a sample of the ended connection", func() bool { return len(lb.ClientRTTs()) == 1 })
}

// FuzzNetworkRTTJSON: whatever a regional load balancer's GET /rtt answers, reading it either fails
// or gives an entry that writes back to JSON that reads the same.
func FuzzNetworkRTTJSON(f *testing.F) {
	f.Add([]byte(`{"network":"10.216.0.0/24","srtt_ms":10.456,"samples":7,"last_seen":"2030-01-02T03:04:05Z"}`))
	f.Add([]byte(`{"network":"2001:db8::/48","srtt_ms":0.001}`))
	f.Add([]byte(`{"network":"10.0.0.0/24","srtt_ms":1e308}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var n NetworkRTT
		if err := json.Unmarshal(data, &n); err != nil {
			return
		}
		if !n.Network.IsValid() || n.SRTT < 0 {
			t.Fatalf("%s read as %+v", data, n)
		}
		first, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		var again NetworkRTT
		if err := json.Unmarshal(first, &again); err != nil {
			t.Fatalf("%s does not read back: %v", first, err)
		}
		if second, _ := json.Marshal(again); string(second) != string(first) {
			t.Fatalf("%s read back as %s", first, second)
		}
	})
}
