package lb

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/lb/lbtest"
)

// clientFrom is an HTTP client whose connections leave from ip (a loopback address), as an
// instance's calls leave from the instance's address.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext, DisableCompression: true}}
}

// callers are an instance of fleet batch at 127.0.0.2 and one of fleet web at 127.0.0.3.
var callers = map[netip.Addr]string{netip.MustParseAddr("127.0.0.2"): "batch", netip.MustParseAddr("127.0.0.3"): "web"}

// A listener whose fleet takes calls only from web answers an instance of batch 403, naming batch
// and the field, without reaching a target; web's instance and a client that is no instance are
// served. A later Apply that makes the caller a web instance lets it in on the same connection.
func TestAllowFromRefusesOtherFleetsInstances(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		b := newBackend(t, "api-0", nil)
		l := httpListener(TargetGroup{Name: "r1", Targets: targets(b)})
		l.Fleet, l.AllowFrom = "api", []string{"web"}
		lb := startLB(t, e, Config{Listeners: []Listener{l}, Callers: callers})
		waitHealthy(t, lb, 1)

		batch := clientFrom("127.0.0.2")
		code, from, body := get(t, batch, url(lb, "/"))
		if code != http.StatusForbidden || from != "" || !strings.Contains(body, "fleet batch") || !strings.Contains(body, "spec.discovery.allowFrom (web)") {
			t.Errorf("batch's instance: %d from %q %q, want 403 naming fleet batch and spec.discovery.allowFrom", code, from, body)
		}
		if n := b.hits.Load(); n != 0 {
			t.Errorf("the target got %d requests of a refused caller", n)
		}
		for _, ip := range []string{"127.0.0.3", "127.0.0.1"} {
			if code, from, _ := get(t, clientFrom(ip), url(lb, "/")); code != http.StatusOK || from != "api-0" {
				t.Errorf("caller %s: %d from %q, want 200 from api-0", ip, code, from)
			}
		}

		if err := lb.Apply(Config{Listeners: []Listener{l}, Callers: map[netip.Addr]string{netip.MustParseAddr("127.0.0.2"): "web"}}); err != nil {
			t.Fatal(err)
		}
		if code, from, _ := get(t, batch, url(lb, "/")); code != http.StatusOK || from != "api-0" {
			t.Errorf("after the caller became web's: %d from %q, want 200 from api-0", code, from)
		}
	})
}

// A TCP listener closes a refused caller's connection before dialing a target, and serves the others.
func TestAllowFromClosesTCP(t *testing.T) {
	echo := lbtest.EchoServer(t)
	lb := startLB(t, EngineFast, Config{Callers: callers, Listeners: []Listener{{
		Name: "db/tcp", Fleet: "db", Address: "127.0.0.1:0", Protocol: ProtocolTCP, AllowFrom: []string{"web"},
		HealthCheck: HealthCheck{Interval: Duration(100 * time.Millisecond)},
		Groups:      []TargetGroup{{Name: "r1", Targets: []Target{{ID: "echo", Address: echo}}}},
	}}})
	waitHealthy(t, lb, 1)
	echoFrom := func(ip string) string {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		c, err := d.Dial("tcp", lb.Addr("db/tcp").String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = io.WriteString(c, "ping")
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		return string(got)
	}
	if got := echoFrom("127.0.0.2"); got != "" {
		t.Errorf("batch's instance got %q, want its connection closed", got)
	}
	if got := echoFrom("127.0.0.3"); got != "ping" {
		t.Errorf("web's instance got %q, want its echo", got)
	}
}

// Apply builds the refused addresses only for a listener with allowFrom, without the fleets it
// names, and keeps Callers through the defaults.
func TestRefusedCallers(t *testing.T) {
	if got := refusedCallers(Listener{}, callers); got != nil {
		t.Errorf("without allowFrom: %v, want nil", got)
	}
	got := refusedCallers(Listener{AllowFrom: []string{"web"}}, callers)
	if len(got) != 1 || got[netip.MustParseAddr("127.0.0.2")] != "batch" {
		t.Errorf("allowFrom web: %v, want batch's instance only", got)
	}
	if d := (Config{Callers: callers}).WithDefaults(); len(d.Callers) != 2 {
		t.Errorf("WithDefaults dropped the callers: %v", d.Callers)
	}
}
