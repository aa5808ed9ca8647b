package netlab_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/internal/global/front"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider/local/regiontest"
)

// frontDo calls the front door's admin API over its Unix socket.
func frontDo(t *testing.T, f netlab.Front, method, path, body string) (int, string) {
	t.Helper()
	return adminCall(t, f.AdminClient(), f.AdminURL, f.TokenFile, method, path, body)
}

// frontLoad is steady load from a client network: workers GET url in a loop and count, by region
// (the body), the answers and the failures.
type frontLoad struct {
	mu       sync.Mutex
	byRegion map[string]int
	firstAt  map[string]time.Time // first answer of each region
	failed   atomic.Int64
	failures []string
	stop     chan struct{}
	wg       sync.WaitGroup
}

func startFrontLoad(ns, url string, workers int) *frontLoad {
	l := &frontLoad{byRegion: map[string]int{}, firstAt: map[string]time.Time{}, stop: make(chan struct{})}
	for range workers {
		l.wg.Go(func() {
			c := regiontest.HTTPClient(ns, 5*time.Second)
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				resp, err := c.Get(url)
				var body []byte
				if err == nil {
					body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
					if err == nil && resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
					}
				}
				l.mu.Lock()
				if err != nil {
					l.failed.Add(1)
					if len(l.failures) < 10 {
						l.failures = append(l.failures, err.Error())
					}
				} else {
					r := string(body)
					l.byRegion[r]++
					if _, ok := l.firstAt[r]; !ok {
						l.firstAt[r] = time.Now()
					}
				}
				l.mu.Unlock()
			}
		})
	}
	return l
}

func (l *frontLoad) count(region string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.byRegion[region]
}

func (l *frontLoad) halt() {
	close(l.stop)
	l.wg.Wait()
}

// TestIntegrationFrontDoor: two regions 10 ms and 60 ms away, each with its regional load balancer
// serving an HTTP server in its router; the front door in the internet namespace sends a client's
// load to the nearer region, and when that region is partitioned, to the other one without a
// failed GET. The regional load balancers' RTT tables show two client networks, each on a /24
// of its own, at their own distances.
func TestIntegrationFrontDoor(t *testing.T) {
	p, _ := regionEnv(t, "near", "far")
	ctx := context.Background()
	client, err := p.Lab().AddClient(ctx, "home", netlab.Shape{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	latency := map[string]time.Duration{"near": 10 * time.Millisecond, "far": 60 * time.Millisecond}
	var regions []front.Region
	regionLBs := map[string]netlab.RegionLB{}
	for _, r := range []string{"near", "far"} {
		rn, err := p.Lab().EnsureNetwork(ctx, r, map[string]string{"latency": latency[r].String()})
		if err != nil {
			t.Fatal(err)
		}
		app := net.JoinHostPort(rn.LANAddress.String(), "8000")
		serveHTTP(t, listenIn(t, rn.RouterNetns, app), r)
		rlb, err := p.Lab().EnsureRegionLB(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		regionLBs[r] = rlb
		cfg := fmt.Sprintf(`{"listeners": [{"name": "web/http", "fleet": "web", "address": ":8080",
			"healthCheck": {"path": "/", "interval": "500ms"},
			"groups": [{"name": "rev-1", "targets": [{"id": "%s-a", "address": "%s"}]}]}]}`, r, app)
		if code, body := adminDo(t, rlb, http.MethodPut, "/config", cfg); code != http.StatusOK {
			t.Fatalf("region %s: PUT /config: %d %s", r, code, body)
		}
		url := "http://" + net.JoinHostPort(rlb.DataAddress.String(), "8080") + "/"
		if got := getFrom(t, client.Netns, url, 30*time.Second); got != r {
			t.Fatalf("GET %s from the client: %q, want %q", url, got, r)
		}
		regions = append(regions, front.Region{Name: r, Address: net.JoinHostPort(rlb.DataAddress.String(), "8080")})
	}

	// Far first: the front door must rank regions by distance, not by their order.
	f, err := p.Lab().EnsureFront(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(f.AdminSocket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin socket %s: %v; want mode 0600", f.AdminSocket, err)
	}
	cfg, err := json.Marshal(front.Config(front.Listener{Name: "web/http", Fleet: "web", Address: ":80", HealthPath: "/",
		Regions: []front.Region{regions[1], regions[0]}}))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := frontDo(t, f, http.MethodPut, "/config", string(cfg)); code != http.StatusOK {
		t.Fatalf("front door: PUT /config: %d %s", code, body)
	}
	var health []lb.TargetHealth
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, body := frontDo(t, f, http.MethodGet, "/health", "")
		if err := json.Unmarshal([]byte(body), &health); err != nil {
			t.Fatalf("front door: GET /health: %v: %s", err, body)
		}
		ready := len(health) == 2
		for _, h := range health {
			ready = ready && h.State == lb.StateHealthy && h.RTT > 0
		}
		if ready {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("front door: regions not healthy and measured within 30s: %+v", health)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, h := range health {
		t.Logf("front door -> region %s (latency %s): healthy, measured round trip %s", h.ID, latency[h.ID], h.RTT)
	}

	url := "http://" + net.JoinHostPort(f.DataAddress.String(), "80") + "/"
	load := startFrontLoad(client.Netns, url, 4)
	defer func() {
		select {
		case <-load.stop:
		default:
			load.halt()
		}
	}()
	waitUntil(t, 30*time.Second, "200 answers through the front door", func() bool { return load.count("near")+load.count("far") >= 200 })
	if n, far := load.count("near"), load.count("far"); far != 0 || load.failed.Load() != 0 {
		t.Fatalf("through the front door: near %d, far %d, failed %d (%v); want every request on the near region", n, far, load.failed.Load(), load.failures)
	}

	// Partition the near region under load.
	if err := p.Lab().Partition(ctx, "near"); err != nil {
		t.Fatal(err)
	}
	cut := time.Now()
	waitUntil(t, 30*time.Second, "answers from the far region", func() bool { return load.count("far") > 0 })
	load.mu.Lock()
	moved := load.firstAt["far"].Sub(cut)
	load.mu.Unlock()
	farBefore := load.count("far")
	waitUntil(t, 60*time.Second, "100 more answers from the far region", func() bool { return load.count("far") >= farBefore+100 })
	load.halt()
	t.Logf("front door: near region partitioned; the first answer from the far region came %d ms later; %d answers from near, %d from far, %d failed",
		moved.Milliseconds(), load.count("near"), load.count("far"), load.failed.Load())
	t.Logf("front: failed_requests=%d failover_ms=%d", load.failed.Load(), moved.Milliseconds())
	if load.failed.Load() != 0 {
		t.Errorf("%d GETs through the front door failed while the near region was partitioned: %v", load.failed.Load(), load.failures)
	}
	if err := p.Lab().Restore(ctx, "near"); err != nil {
		t.Fatal(err)
	}

	// Each regional load balancer measures each client network at its own distance: a second
	// client network, 100 ms farther from the near region only, ranks the regions the other way,
	// and shows up in the tables as a /24 of its own.
	remote, err := p.Lab().AddClient(ctx, "remote", netlab.Shape{}, map[string]time.Duration{"near": 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	clients := []netlab.ClientNetwork{client, remote}
	want := map[string]map[string]time.Duration{ // client -> region -> round trip
		"home":   {"near": latency["near"], "far": latency["far"]},
		"remote": {"near": latency["near"] + 100*time.Millisecond, "far": latency["far"]},
	}
	for _, c := range clients {
		if c.Network != netip.PrefixFrom(netip.MustParseAddr(c.Address), 24).Masked().String() {
			t.Errorf("client network %s: address %s outside its network %s", c.Name, c.Address, c.Network)
		}
		for r, rlb := range regionLBs {
			url := "http://" + net.JoinHostPort(rlb.DataAddress.String(), "8080") + "/"
			for range 3 { // a new connection each: each is one sample
				if got := getFrom(t, c.Netns, url, 30*time.Second); got != r {
					t.Fatalf("GET %s from %s: %q, want %q", url, c.Name, got, r)
				}
			}
		}
	}
	if client.Network == remote.Network {
		t.Fatalf("client networks home and remote share the network %s", client.Network)
	}
	for r, rlb := range regionLBs {
		table, err := (&lb.AdminClient{URL: rlb.AdminURL, Token: readToken(t, rlb.TokenFile)}).ClientRTTs()
		if err != nil {
			t.Fatalf("region %s: %v", r, err)
		}
		byNet := map[netip.Prefix]lb.NetworkRTT{}
		for _, e := range table {
			byNet[e.Network] = e
			t.Logf("region %s: GET /rtt: %s at %s over %d samples", r, e.Network, e.SRTT, e.Samples)
		}
		for _, c := range clients {
			got, ok := byNet[netip.MustParsePrefix(c.Network)]
			if !ok {
				t.Errorf("region %s: GET /rtt has no entry for client network %s (%s): %v", r, c.Name, c.Network, table)
				continue
			}
			w := want[c.Name][r]
			t.Logf("region %s: client network %s (%s) at %s, expected %s", r, c.Name, c.Network, got.SRTT, w)
			if got.SRTT < w*8/10 || got.SRTT > w*3/2+20*time.Millisecond {
				t.Errorf("region %s: client network %s's round trip is %s, far from the %s its links add up to", r, c.Name, got.SRTT, w)
			}
		}
	}
}

// readToken returns the bearer token in path.
func readToken(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// waitUntil polls cond every 10 ms until it holds, or fails the test after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within %s", what, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
