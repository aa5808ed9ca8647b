package rtt

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lb/lbtest"
)

// rttLB is a load balancer's admin API serving GET /rtt from a table the test sets, or failing.
type rttLB struct {
	srv *httptest.Server

	mu    sync.Mutex
	table []lb.NetworkRTT
	down  bool
}

func newRTTLB(t *testing.T, token string, table ...lb.NetworkRTT) *rttLB {
	a := &rttLB{table: table}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token || r.URL.Path != "/rtt" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.down {
			http.Error(w, `{"error":"restarting"}`, http.StatusServiceUnavailable)
			return
		}
		_ = json.NewEncoder(w).Encode(a.table)
	}))
	t.Cleanup(a.srv.Close)
	return a
}

func (a *rttLB) set(down bool, table ...lb.NetworkRTT) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.down, a.table = down, table
}

func netRTT(network string, ms int) lb.NetworkRTT {
	return lb.NetworkRTT{Network: netip.MustParsePrefix(network), SRTT: time.Duration(ms) * time.Millisecond, Samples: 3, LastSeen: time.Unix(1700000000, 0).UTC()}
}

// TestCollector merges the regions' tables into client network -> region -> RTT, read over the admin
// API; keeps a region's last table while its load balancer does not answer; drops the table of a
// region that is no longer a source.
func TestCollector(t *testing.T) {
	eu := newRTTLB(t, "tok-eu", netRTT("10.216.1.0/24", 10), netRTT("10.216.2.0/24", 110))
	us := newRTTLB(t, "tok-us", netRTT("10.216.1.0/24", 60), netRTT("10.216.2.0/24", 60), netRTT("2001:db8::/48", 80))
	var mu sync.Mutex
	sources := map[string]Source{
		"eu": &lb.AdminClient{URL: eu.srv.URL, Token: "tok-eu"},
		"us": &lb.AdminClient{URL: us.srv.URL, Token: "tok-us"},
	}
	r := New(Options{Sources: func() map[string]Source {
		mu.Lock()
		defer mu.Unlock()
		out := map[string]Source{}
		for k, v := range sources {
			out[k] = v
		}
		return out
	}})
	r.Refresh()
	ms := time.Millisecond
	want := map[string]map[string]time.Duration{
		"10.216.1.0/24": {"eu": 10 * ms, "us": 60 * ms},
		"10.216.2.0/24": {"eu": 110 * ms, "us": 60 * ms},
		"2001:db8::/48": {"us": 80 * ms},
	}
	check := func(want map[string]map[string]time.Duration) {
		t.Helper()
		got := r.ClientRTTs()
		if len(got) != len(want) {
			t.Errorf("ClientRTTs: %v, want %v", got, want)
		}
		for n, regions := range want {
			g := got[netip.MustParsePrefix(n)]
			if len(g) != len(regions) {
				t.Errorf("%s: %v, want %v", n, g, regions)
			}
			for region, d := range regions {
				if g[region] != d {
					t.Errorf("%s in %s: %s, want %s", n, region, g[region], d)
				}
			}
		}
	}
	check(want)
	entries := r.Entries()
	if len(entries) != 5 || entries[0].RTT.Network.String() != "10.216.1.0/24" || entries[0].Region != "eu" || entries[4].Region != "us" {
		t.Errorf("Entries: %+v", entries)
	}

	// eu's load balancer stops answering: its last table stays, with the error in its status.
	eu.set(true)
	us.set(false, netRTT("10.216.1.0/24", 61))
	r.Refresh()
	check(map[string]map[string]time.Duration{
		"10.216.1.0/24": {"eu": 10 * ms, "us": 61 * ms},
		"10.216.2.0/24": {"eu": 110 * ms},
	})
	st := r.Status()
	if len(st) != 2 || st[0].Region != "eu" || st[0].Error == "" || st[0].Networks != 2 || st[1].Error != "" || st[1].ReadAt.IsZero() {
		t.Errorf("Status: %+v", st)
	}

	// us is no longer a source (no fleet served regionally runs there): its table goes.
	mu.Lock()
	delete(sources, "us")
	mu.Unlock()
	r.Refresh()
	check(map[string]map[string]time.Duration{"10.216.1.0/24": {"eu": 10 * ms}, "10.216.2.0/24": {"eu": 110 * ms}})
}

// TestCollectorRun reads at once when started and again every interval, until its context ends.
func TestCollectorRun(t *testing.T) {
	a := newRTTLB(t, "tok", netRTT("10.0.0.0/24", 5))
	r := New(Options{Interval: 20 * time.Millisecond, Sources: func() map[string]Source {
		return map[string]Source{"eu": &lb.AdminClient{URL: a.srv.URL, Token: "tok"}}
	}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	waitRTT(t, r, "10.0.0.0/24", "eu", 5*time.Millisecond)
	a.set(false, netRTT("10.0.0.0/24", 7))
	waitRTT(t, r, "10.0.0.0/24", "eu", 7*time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}

func waitRTT(t *testing.T, r *Collector, network, region string, want time.Duration) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.ClientRTTs()[netip.MustParsePrefix(network)][region] != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s in %s: %v, want %s", network, region, r.ClientRTTs(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestCollectorFromRealLB: a real load balancer that served a client over a real TCP connection
// reports the client's network through its real admin API, and the table holds what the load
// balancer itself measured.
func TestCollectorFromRealLB(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("TCP_INFO is read on Linux only")
	}
	echo := lbtest.EchoServer(t)
	balancer := lb.New(lb.Options{})
	cfg := lb.Config{Listeners: []lb.Listener{{Name: "db/tcp", Fleet: "db", Address: "127.0.0.1:0", Protocol: lb.ProtocolTCP,
		Groups: []lb.TargetGroup{{Name: "v1", Targets: []lb.Target{{ID: "echo", Address: echo}}}}}}}
	if err := balancer.Apply(cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- balancer.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	admin, err := lb.NewAdminHandler(balancer, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(admin)
	t.Cleanup(srv.Close)

	r := New(Options{Sources: func() map[string]Source {
		return map[string]Source{"eu": &lb.AdminClient{URL: srv.URL, Token: "tok"}}
	}})
	r.Refresh()
	if got := r.ClientRTTs(); len(got) != 0 {
		t.Fatalf("before any client: %v", got)
	}
	// One connection through the load balancer, sampled when it ends.
	deadline := time.Now().Add(10 * time.Second)
	for len(balancer.ClientRTTs()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the load balancer sampled no client connection within 10s")
		}
		c, err := net.Dial("tcp", balancer.Addr("db/tcp").String())
		if err == nil {
			_, err = c.Write([]byte("ping"))
			if err == nil {
				_, err = io.ReadFull(c, make([]byte, 4))
			}
			c.Close()
		}
		if err != nil && !errors.Is(err, io.EOF) {
			t.Logf("through the load balancer: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.Refresh()
	want := balancer.ClientRTTs()[0]
	got := r.ClientRTTs()[netip.MustParsePrefix("127.0.0.0/24")]["eu"]
	if got <= 0 || got.Round(time.Microsecond) != want.SRTT.Round(time.Microsecond) {
		t.Errorf("127.0.0.0/24 in eu: %s, the load balancer measured %s", got, want.SRTT)
	}
	t.Logf("loopback client network through a real load balancer: %s", got)
}
