// Package regiontest gives integration tests of other packages a local provider whose regions
// are real networks (router namespaces, shaped links, client networks), on a fresh data
// directory, removed and checked for leftovers when the test ends.
package regiontest

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

// Provider skips unless region networks can be made here (root, ip, nsenter, TUN; not under
// -short), takes the host-wide lock, and returns a local provider on a fresh data directory
// that runs a freshly built herd (for `herd link-relay` and `herd lb`). When the test ends it
// removes every network and checks that nothing of the regions and clients named is left.
func Provider(t *testing.T, regions, clients []string) *local.Provider {
	t.Helper()
	p, _ := NewProvider(t, regions, clients)
	return p
}

// NewProvider is Provider, with the options it was made with: a test that restarts herd up makes
// a second provider on them, which adopts what the first one left.
func NewProvider(t *testing.T, regions, clients []string) (*local.Provider, local.Options) {
	t.Helper()
	if testing.Short() {
		t.Skip("region networks: skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("region networks need root (network namespaces, bridges, TUN devices)")
	}
	for _, c := range []string{"ip", "nsenter"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("needs %s (make deps)", c)
		}
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("needs /dev/net/tun (a kernel with TUN)")
	}
	bin := buildHerd(t)
	localtest.Exclusive(t)
	before := localtest.Take(t)
	dataDir, err := os.MkdirTemp("", "hrt-")
	if err != nil {
		t.Fatal(err)
	}
	opts := local.Options{DataDir: dataDir, HerdBinary: bin,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	p, err := local.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Lab().RemoveNetworks(context.Background()); err != nil {
			t.Errorf("RemoveNetworks: %v", err)
		}
		o := localtest.Owned{Dirs: []string{dataDir}, Gone: []string{filepath.Join(dataDir, "providers", "local", "net")}}
		for _, r := range regions {
			router, internet, veth := p.Lab().RegionHostNames(r)
			o.Netns = append(o.Netns, router, internet)
			o.Links = append(o.Links, veth, p.BridgeName(r))
		}
		for _, c := range clients {
			o.Netns = append(o.Netns, p.Lab().ClientNetns(c))
		}
		localtest.AssertClean(t, before, o)
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dataDir, "providers", "local", "net", "*", "*", "*.log"))
			for _, l := range logs {
				data, _ := os.ReadFile(l)
				t.Logf("--- %s\n%s", l, data)
			}
		}
		os.RemoveAll(dataDir)
	})
	return p, opts
}

// InNetns runs fn on a thread that joined network namespace ns (/run/netns/<ns>); sockets fn
// makes live there. The thread is dropped afterwards.
func InNetns(ns string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		f, err := os.Open(filepath.Join("/run/netns", ns))
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// DialIn dials address from network namespace ns.
func DialIn(ctx context.Context, ns, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := InNetns(ns, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		conn = c
		return err
	})
	return conn, err
}

// ConnectTimes makes n TCP connects from network namespace ns to address (each takes one round
// trip) and returns how long each took, shortest first.
func ConnectTimes(t testing.TB, ns, address string, n int) []time.Duration {
	t.Helper()
	out := make([]time.Duration, 0, n)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		start := time.Now()
		c, err := DialIn(ctx, ns, "tcp", address)
		d := time.Since(start)
		cancel()
		if err != nil {
			t.Fatalf("connect to %s from %s: %v", address, ns, err)
		}
		c.Close()
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// HTTPClient is an HTTP client whose connections are made in network namespace ns, as a
// client living there; it keeps connections alive.
func HTTPClient(ns string, timeout time.Duration) *http.Client {
	return &http.Client{Timeout: timeout, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, address string) (net.Conn, error) {
			return DialIn(ctx, ns, network, address)
		},
		MaxIdleConnsPerHost: 16,
	}}
}

func buildHerd(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		t.Fatalf("go env GOMOD: not inside the herd module (%v)", err)
	}
	bin := filepath.Join(t.TempDir(), "herd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/herd")
	cmd.Dir = filepath.Dir(mod)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/herd: %v\n%s", err, out)
	}
	return bin
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
