package dns

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestGoResolver resolves hostnames with Go's own resolver pointed at the server.
func TestGoResolver(t *testing.T) {
	_, addr := startServer(t, testTable(), nil)
	for _, network := range []string{"udp", "tcp"} {
		res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		got, err := res.LookupHost(ctx, "fo.herd.test")
		cancel()
		slices.Sort(got)
		if err != nil || !slices.Equal(got, []string{euAddr.String(), euAddr6.String()}) {
			t.Errorf("%s: LookupHost(fo.herd.test) = %v, %v; want eu's addresses", network, got, err)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		_, err = res.LookupHost(ctx, "nope.herd.test")
		cancel()
		var dnsErr *net.DNSError
		if !errors.As(err, &dnsErr) || !dnsErr.IsNotFound {
			t.Errorf("%s: LookupHost(nope.herd.test) error %v, want not found", network, err)
		}
	}
	// 100 addresses do not fit a UDP reply: Go's resolver sees TC and retries over TCP.
	res := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	got, err := res.LookupIPAddr(ctx, "big.herd.test")
	if err != nil || len(got) != 100 {
		t.Errorf("LookupIPAddr(big.herd.test): %d addresses, %v; want 100 (TC then TCP)", len(got), err)
	}
}

// TestDig queries the server with dig, from Debian's bind9-dnsutils (hack/install-deps.sh).
func TestDig(t *testing.T) {
	dig, err := exec.LookPath("dig")
	if err != nil {
		t.Skip("dig is not installed: run hack/install-deps.sh (Debian package bind9-dnsutils)")
	}
	_, addr := startServer(t, testTable(), nil)
	host, port, _ := net.SplitHostPort(addr)
	run := func(args ...string) string {
		t.Helper()
		args = append([]string{"@" + host, "-p", port, "+time=2", "+tries=1"}, args...)
		out, err := exec.Command(dig, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("dig %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := strings.TrimSpace(run("+short", "fo.herd.test", "A")); out != euAddr.String() {
		t.Errorf("dig +short fo.herd.test A = %q, want %s", out, euAddr)
	}
	if out := strings.TrimSpace(run("+short", "+subnet=10.1.2.0/24", "geo.herd.test", "A")); out != usAddr.String() {
		t.Errorf("dig +subnet=10.1.2.0/24 geo.herd.test = %q, want %s", out, usAddr)
	}
	if out := run("nope.herd.test", "A"); !strings.Contains(out, "status: NXDOMAIN") || !strings.Contains(out, "flags: qr aa") {
		t.Errorf("dig nope.herd.test: want an authoritative NXDOMAIN, got\n%s", out)
	}
	if out := run("example.com", "A"); !strings.Contains(out, "status: REFUSED") {
		t.Errorf("dig example.com: want REFUSED, got\n%s", out)
	}
	// dig retries a truncated answer over TCP by itself.
	if out := run("+bufsize=1232", "big.herd.test", "A"); !strings.Contains(out, "Truncated, retrying in TCP mode") || !strings.Contains(out, "ANSWER: 100") {
		t.Errorf("dig big.herd.test: want TC then 100 answers over TCP, got\n%s", out)
	}
	if out := run("+tcp", "herd.test", "ANY"); !strings.Contains(out, "ANSWER: 1") || !strings.Contains(out, "SOA") {
		t.Errorf("dig +tcp herd.test ANY: want the SOA alone, got\n%s", out)
	}
}
