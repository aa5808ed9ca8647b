package netlab_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/regiontest"
)

// regionEnv is regiontest's provider on real region networks, with the client networks home
// and remote, and the options to make a second provider on the same data directory.
func regionEnv(t *testing.T, regions ...string) (*local.Provider, local.Options) {
	t.Helper()
	return regiontest.NewProvider(t, regions, []string{"home", "remote"})
}

// listenIn listens on addr inside namespace ns until the test ends.
func listenIn(t *testing.T, ns, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := regiontest.InNetns(ns, func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// acceptAndClose listens on addr in namespace ns and closes every connection it accepts: a
// TCP connect to it takes one round trip.
func acceptAndClose(t *testing.T, ns, addr string) net.Listener {
	return acceptEach(t, ns, addr, func(c net.Conn) { c.Close() })
}

// acceptAndDiscard listens on addr in namespace ns and reads every connection to its end.
func acceptAndDiscard(t *testing.T, ns, addr string) net.Listener {
	return acceptEach(t, ns, addr, func(c net.Conn) { go func() { io.Copy(io.Discard, c); c.Close() }() })
}

func acceptEach(t *testing.T, ns, addr string, handle func(net.Conn)) net.Listener {
	ln := listenIn(t, ns, addr)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	return ln
}

// sendBulk sends size bytes from namespace ns to addr over TCP.
func sendBulk(t *testing.T, ns, addr string, size int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := regiontest.DialIn(ctx, ns, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Minute))
	if _, err := io.CopyN(c, zeros{}, int64(size)); err != nil {
		t.Fatalf("send %d bytes to %s: %v", size, addr, err)
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) { clear(b); return len(b), nil }

// serveHTTP answers every request on ln with body.
func serveHTTP(t *testing.T, ln net.Listener, body string) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// TestIntegrationRegionLatency: two regions 10 ms and 60 ms away; a client on the internet
// measures the round trip of a TCP connect to each region's router.
func TestIntegrationRegionLatency(t *testing.T) {
	p, _ := regionEnv(t, "near", "far")
	ctx := context.Background()
	client, err := p.Lab().AddClient(ctx, "home", netlab.Shape{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	latency := map[string]time.Duration{"near": 10 * time.Millisecond, "far": 60 * time.Millisecond}
	median := map[string]time.Duration{}
	for _, r := range []string{"near", "far"} {
		rn, err := p.Lab().EnsureNetwork(ctx, r, map[string]string{"latency": latency[r].String()})
		if err != nil {
			t.Fatal(err)
		}
		if rn.Shape.Latency != latency[r] {
			t.Fatalf("region %s: shape %s, want latency %s", r, rn.Shape, latency[r])
		}
		ln := acceptAndClose(t, rn.RouterNetns, net.JoinHostPort(rn.WANAddress.String(), "7000"))
		rtts := regiontest.ConnectTimes(t, client.Netns, ln.Addr().String(), 41)
		median[r] = rtts[len(rtts)/2]
		t.Logf("region %s (latency %s): TCP connect from the client: min %s, median %s, max %s (41 samples)",
			r, latency[r], rtts[0], median[r], rtts[len(rtts)-1])
		if median[r] < latency[r] {
			t.Errorf("region %s: median round trip %s is below its latency %s: the link does not delay every packet", r, median[r], latency[r])
		}
	}
	if median["far"] <= median["near"] {
		t.Errorf("the far region (%s) answers no slower than the near one (%s)", median["far"], median["near"])
	}
	// A client network 30 ms from the internet is 30 ms further from every region, and 100 ms
	// more from the near region than from the far one.
	remote, err := p.Lab().AddClient(ctx, "remote", netlab.Shape{Latency: 30 * time.Millisecond}, map[string]time.Duration{"near": 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	near, err := p.Lab().Region("near")
	if err != nil {
		t.Fatal(err)
	}
	rtts := regiontest.ConnectTimes(t, remote.Netns, net.JoinHostPort(near.WANAddress.String(), "7000"), 21)
	t.Logf("remote client (30ms, 100ms more to near) -> near region (10ms): TCP connect min %s, median %s, max %s (21 samples)", rtts[0], rtts[len(rtts)/2], rtts[len(rtts)-1])
	if rtts[len(rtts)/2] < 140*time.Millisecond {
		t.Errorf("the remote client reaches the near region in %s, below the 140ms of both links and its own latency to it", rtts[len(rtts)/2])
	}
	far, err := p.Lab().Region("far")
	if err != nil {
		t.Fatal(err)
	}
	rtts = regiontest.ConnectTimes(t, remote.Netns, net.JoinHostPort(far.WANAddress.String(), "7000"), 21)
	t.Logf("remote client (30ms) -> far region (60ms): TCP connect min %s, median %s, max %s (21 samples)", rtts[0], rtts[len(rtts)/2], rtts[len(rtts)-1])
	if rtts[len(rtts)/2] < 90*time.Millisecond {
		t.Errorf("the remote client reaches the far region in %s, below the 90ms of both links", rtts[len(rtts)/2])
	}
	// The host (the control plane) reaches the router over the bridge, not through the link.
	rn, err := p.Lab().Region("far")
	if err != nil {
		t.Fatal(err)
	}
	ln := acceptAndClose(t, rn.RouterNetns, net.JoinHostPort(rn.LANAddress.String(), "7001"))
	start := time.Now()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("the host does not reach the far region's router at %s: %v", ln.Addr(), err)
	}
	c.Close()
	t.Logf("host -> far router over the bridge: TCP connect %s", time.Since(start))
}

// udpThrough sends n datagrams from namespace from to addr, received in namespace to, and
// returns how many arrived once no more come.
func udpThrough(t *testing.T, from, to string, addr netip.AddrPort, n int) (got, sent int) {
	t.Helper()
	var rc, sc net.PacketConn
	if err := regiontest.InNetns(to, func() (err error) { rc, err = net.ListenPacket("udp", addr.String()); return err }); err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if err := regiontest.InNetns(from, func() (err error) { sc, err = net.ListenPacket("udp", ":0"); return err }); err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	done := make(chan int)
	go func() {
		buf := make([]byte, 64)
		count := 0
		for {
			rc.SetReadDeadline(time.Now().Add(2 * time.Second))
			if _, _, err := rc.ReadFrom(buf); err != nil {
				done <- count
				return
			}
			count++
		}
	}()
	for i := range n {
		if _, err := sc.WriteTo([]byte(fmt.Sprint(i)), net.UDPAddrFromAddrPort(addr)); err != nil {
			t.Fatalf("send: %v", err)
		}
		if i%10 == 9 {
			time.Sleep(time.Millisecond) // paced, so that no queue on the way overflows
		}
	}
	return <-done, n
}

// instanceLike makes a network namespace with an address on the region's bridge, as an instance
// has, and removes it when the test ends.
func instanceLike(t *testing.T, rn netlab.RegionNetwork, host byte) (ns string, addr netip.Addr) {
	t.Helper()
	a := rn.Subnet.Addr().As4()
	a[3] = host
	addr = netip.AddrFrom4(a)
	ns = fmt.Sprintf("herdtest-%s-%d", rn.Region, host)
	veth := fmt.Sprintf("ht%s%d", rn.Region[:min(4, len(rn.Region))], host)
	steps := [][]string{
		{"netns", "add", ns},
		{"link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns},
		{"link", "set", veth, "master", rn.Bridge, "up"},
		{"-n", ns, "addr", "add", fmt.Sprintf("%s/%d", addr, rn.Subnet.Bits()), "dev", "eth0"},
		{"-n", ns, "link", "set", "eth0", "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "delete", ns).Run()
		exec.Command("ip", "link", "delete", veth).Run()
	})
	for _, s := range steps {
		if out, err := exec.Command("ip", s...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(s, " "), err, out)
		}
	}
	return ns, addr
}

// adminDo calls a regional load balancer's admin API from the host.
func adminDo(t *testing.T, lb netlab.RegionLB, method, path, body string) (int, string) {
	t.Helper()
	return adminCall(t, &http.Client{Timeout: 10 * time.Second}, lb.AdminURL, lb.TokenFile, method, path, body)
}

// adminCall calls the admin API at baseURL with the token in tokenFile.
func adminCall(t *testing.T, c *http.Client, baseURL, tokenFile, method, path, body string) (int, string) {
	t.Helper()
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, baseURL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(out)
}

// getFrom asks url from namespace ns until it answers 200 or timeout passes, and returns the body.
func getFrom(t *testing.T, ns, url string, timeout time.Duration) string {
	t.Helper()
	c := regiontest.HTTPClient(ns, 5*time.Second)
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		resp, err := c.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return string(body)
			}
			last = fmt.Sprintf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body))
		} else {
			last = err.Error()
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("GET %s from %s: no 200 within %s: %s", url, ns, timeout, last)
	return ""
}

// TestIntegrationRegionLB: a client on the internet reaches an HTTP server in an instance-like
// namespace on the region's bridge through the regional herd lb in the router namespace, and
// the load balancer outlives the provider that started it (a new one adopts it, configured).
func TestIntegrationRegionLB(t *testing.T) {
	p, opts := regionEnv(t, "web")
	ctx := context.Background()
	client, err := p.Lab().AddClient(ctx, "home", netlab.Shape{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rn, err := p.Lab().EnsureNetwork(ctx, "web", map[string]string{"latency": "20ms"})
	if err != nil {
		t.Fatal(err)
	}
	ns, addr := instanceLike(t, rn, 200)
	serveHTTP(t, listenIn(t, ns, net.JoinHostPort(addr.String(), "8000")), "hello from the web region")

	lb, err := p.Lab().EnsureRegionLB(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if lb.DataAddress != rn.WANAddress || !strings.Contains(lb.AdminURL, rn.LANAddress.String()) {
		t.Fatalf("load balancer %+v: want data address %s and admin on %s", lb, rn.WANAddress, rn.LANAddress)
	}
	if fi, err := os.Stat(lb.TokenFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, mode %v; want 0600", lb.TokenFile, err, fi.Mode().Perm())
	}
	cfg := fmt.Sprintf(`{"listeners": [{"name": "web/http", "fleet": "web", "address": ":8080",
		"groups": [{"name": "rev-1", "targets": [{"id": "web-a", "address": "%s"}]}]}]}`, net.JoinHostPort(addr.String(), "8000"))
	if code, body := adminDo(t, lb, http.MethodPut, "/config", cfg); code != http.StatusOK {
		t.Fatalf("PUT /config: %d %s", code, body)
	}
	url := "http://" + net.JoinHostPort(lb.DataAddress.String(), "8080") + "/"
	if got := getFrom(t, client.Netns, url, 30*time.Second); got != "hello from the web region" {
		t.Fatalf("GET %s from the client: %q", url, got)
	}
	if code, _ := adminDo(t, netlab.RegionLB{AdminURL: lb.AdminURL, TokenFile: os.DevNull}, http.MethodGet, "/config", ""); code != http.StatusUnauthorized {
		t.Errorf("the admin API without the token answered %d, want 401", code)
	}

	// herd up restarts: a new provider adopts the load balancer, which kept its config.
	p2, err := local.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	lb2, err := p2.Lab().EnsureRegionLB(ctx, "web")
	if err != nil {
		t.Fatal(err)
	}
	if lb2.PID != lb.PID {
		t.Errorf("after a restart the load balancer is pid %d, want the running %d adopted", lb2.PID, lb.PID)
	}
	if code, body := adminDo(t, lb2, http.MethodGet, "/config", ""); code != http.StatusOK || !strings.Contains(body, "web-a") {
		t.Errorf("the adopted load balancer's config: %d %s", code, body)
	}
	if got := getFrom(t, client.Netns, url, 10*time.Second); got != "hello from the web region" {
		t.Fatalf("GET %s after the restart: %q", url, got)
	}
}

// TestIntegrationRegionPartition: Partition cuts the client off the region while the host still
// reaches the router; Restore brings it back; and a partition left by a provider that stopped is
// undone by the next one's start.
func TestIntegrationRegionPartition(t *testing.T) {
	p, opts := regionEnv(t, "cut")
	ctx := context.Background()
	client, err := p.Lab().AddClient(ctx, "home", netlab.Shape{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rn, err := p.Lab().EnsureNetwork(ctx, "cut", nil)
	if err != nil {
		t.Fatal(err)
	}
	ln := listenIn(t, rn.RouterNetns, ":7000")
	serveHTTP(t, ln, "router")
	wanURL := "http://" + net.JoinHostPort(rn.WANAddress.String(), "7000") + "/"
	lanURL := "http://" + net.JoinHostPort(rn.LANAddress.String(), "7000") + "/"
	reachable := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		c, err := regiontest.DialIn(ctx, client.Netns, "tcp", net.JoinHostPort(rn.WANAddress.String(), "7000"))
		if err == nil {
			c.Close()
		}
		return err
	}
	hostGet := func() {
		t.Helper()
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(lanURL)
		if err != nil {
			t.Fatalf("the host's control path to %s: %v", lanURL, err)
		}
		resp.Body.Close()
	}
	getFrom(t, client.Netns, wanURL, 10*time.Second)
	bulk := acceptAndDiscard(t, rn.RouterNetns, net.JoinHostPort(rn.WANAddress.String(), "7004"))
	const size = 64 << 20
	start := time.Now()
	sendBulk(t, client.Netns, bulk.Addr().String(), size)
	t.Logf("unshaped link: %d MiB from the client to the router in %s (%.0f Mbit/s)", size>>20, time.Since(start), float64(size)*8/time.Since(start).Seconds()/1e6)

	if err := p.Lab().Partition(ctx, "cut"); err != nil {
		t.Fatal(err)
	}
	if err := reachable(); err == nil {
		t.Fatal("the client reaches the partitioned region")
	}
	hostGet()
	if got, _ := p.Lab().Region("cut"); got.Chaos == nil || got.Chaos.Action != netlab.ChaosPartition {
		t.Errorf("the region's chaos after Partition: %+v", got.Chaos)
	}
	if err := p.Lab().Restore(ctx, "cut"); err != nil {
		t.Fatal(err)
	}
	if err := reachable(); err != nil {
		t.Fatalf("the client does not reach the region after Restore: %v", err)
	}

	if err := p.Lab().Degrade(ctx, "cut", 80*time.Millisecond, 0); err != nil {
		t.Fatal(err)
	}
	rtts := regiontest.ConnectTimes(t, client.Netns, net.JoinHostPort(rn.WANAddress.String(), "7000"), 11)
	t.Logf("degraded to 80ms: TCP connect median %s", rtts[len(rtts)/2])
	if rtts[len(rtts)/2] < 80*time.Millisecond {
		t.Errorf("degraded to 80ms, the median connect takes %s", rtts[len(rtts)/2])
	}

	// Loss: of datagrams sent one way (10,000 a second), some arrive and some do not.
	if err := p.Lab().Degrade(ctx, "cut", 0, 0.2); err != nil {
		t.Fatal(err)
	}
	got, sent := udpThrough(t, client.Netns, rn.RouterNetns, netip.AddrPortFrom(rn.WANAddress, 7002), 2000)
	t.Logf("degraded to loss 20%%: %d of %d datagrams arrived (%.1f%% lost)", got, sent, 100*float64(sent-got)/float64(sent))
	if got == 0 || got == sent {
		t.Errorf("with loss 20%%, %d of %d datagrams arrived", got, sent)
	}

	// A partition outlives nothing: the next provider start undoes it.
	if err := p.Lab().Partition(ctx, "cut"); err != nil {
		t.Fatal(err)
	}
	if err := reachable(); err == nil {
		t.Fatal("the client reaches the partitioned region")
	}
	p2, err := local.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := p2.Lab().Region("cut"); got.Chaos != nil || got.Shape != (netlab.Shape{}) {
		t.Errorf("after a restart the region's chaos is %+v and shape %s, want none", got.Chaos, got.Shape)
	}
	if err := reachable(); err != nil {
		t.Fatalf("the client does not reach the region after the restart undid the partition: %v", err)
	}
	if err := p2.Lab().Degrade(ctx, "nowhere", time.Second, 0); err == nil {
		t.Error("Degrade of a region without a network succeeded")
	}
}
