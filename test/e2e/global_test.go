package e2e

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
	"herd.dev/herd/internal/provider/local/regiontest"
)

const (
	globalZone = "herd.test."
	globalHost = "hello.herd.test"
	// west is near region eu and 100 ms further from us; east the other way round.
	westNet, eastNet = "west", "east"
	// nsNet is the network herd dns (the zone's name server) runs in, on the internet.
	nsNet = "nameserver"
)

// globalScenario is a fleet of hello in regions eu (10 ms) and us (60 ms) with a hostname in
// herd's zone; clients in two networks, west and east, each nearer one region; herd dns, following
// herd up over its API socket, serving the zone from a network of its own on the internet.
type globalScenario struct {
	*regionsScenario
	clients map[string]netlab.ClientNetwork
	ns      string // the name server's address:53
}

func startGlobalScenario(t *testing.T) *globalScenario {
	e := newEnv(t, withHello)
	before := localtest.Take(t)
	e.regions = []string{nearRegion, farRegion}
	e.clientNets = []string{westNet, eastNet, nsNet}
	localtest.CleanupOnInterrupt(t, func() { e.cleanup(before) })
	sock := filepath.Join(e.dir, "api.sock")
	e.upArgs = []string{"--dns-zone", globalZone, "--dns-listen", "127.0.0.1:" + strconv.Itoa(freeport.TCP(t)), "--api-socket", sock}
	e.startUp()
	e.lbPort = freeport.TCP(t)
	s := &globalScenario{regionsScenario: &regionsScenario{env: e}, clients: map[string]netlab.ClientNetwork{}}
	s.spec = fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: %%s
  replicas: {min: 1, max: 4, desired: 1}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1, gracePeriod: %s}
  regions:
  - {name: %s, provider: local, options: {latency: %s}}
  - {name: %s, provider: local, options: {latency: %s}}
  global:
    hostname: %s
%%s`, regionsFleet, e.lbPort, helloPort, helloPort, regionsGrace, nearRegion, nearLatency, farRegion, farLatency, globalHost)
	p, err := local.New(local.Options{DataDir: e.data, HerdBinary: e.bin})
	if err != nil {
		t.Fatal(err)
	}
	// Runs before e.cleanup: the client networks go, then the fleet, then herd up.
	localtest.CleanupOnInterrupt(t, func() {
		for _, c := range e.clientNets {
			if err := p.Lab().RemoveClient(context.Background(), c); err != nil {
				t.Errorf("remove client network %s: %v", c, err)
			}
		}
	})
	start := time.Now()
	s.applyGlobal("    policy: failover\n")
	s.waitServing(2)
	t.Logf("2 instances in 2 regions serving %.1f s after the apply", time.Since(start).Seconds())
	s.waitLBsSynced(time.Minute)
	far := map[string]map[string]time.Duration{
		westNet: {farRegion: 100 * time.Millisecond},
		eastNet: {nearRegion: 100 * time.Millisecond},
	}
	for _, name := range e.clientNets {
		c, err := p.Lab().AddClient(context.Background(), name, netlab.Shape{}, far[name])
		if err != nil {
			t.Fatal(err)
		}
		s.clients[name] = c
	}
	s.users = s.clients[westNet].Netns
	t.Cleanup(func() {
		if t.Failed() {
			s.regionLogs(t)
		}
	})

	// herd dns in its own network, as a region's name server would run: it follows herd up over
	// the API socket, which is reachable from any network namespace of the machine.
	s.ns = net.JoinHostPort(s.clients[nsNet].Address, "53")
	logf, err := os.Create(filepath.Join(e.dir, "dns.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", s.clients[nsNet].Netns, e.bin, "dns", "--zone", globalZone,
		"--listen", s.ns, "--server", "unix://"+sock, "--interval", "250ms")
	cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(e.dir, "config"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	localtest.CleanupOnInterrupt(t, func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			data, _ := os.ReadFile(filepath.Join(e.dir, "dns.log"))
			t.Logf("herd dns log:\n%s", tail(string(data), 30))
		}
	})
	return s
}

// applyGlobal applies the fleet with policy, the rest of spec.global (indented by four spaces).
func (s *globalScenario) applyGlobal(policy string) {
	s.applyFleet(fmt.Appendf(nil, s.spec, "hello", policy))
}

// query asks the name server, over conn, for the hostname's A records, with an EDNS Client
// Subnet option when ecs is valid, and returns the addresses answered.
func (s *globalScenario) query(conn *dns.Conn, ecs netip.Prefix) ([]string, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(globalHost), dns.TypeA)
	if ecs.IsValid() {
		o := new(dns.OPT)
		o.Hdr.Name, o.Hdr.Rrtype = ".", dns.TypeOPT
		o.SetUDPSize(1232)
		o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: uint8(ecs.Bits()), Address: ecs.Addr().AsSlice()})
		m.Extra = append(m.Extra, o)
	}
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if err := conn.WriteMsg(m); err != nil {
		return nil, err
	}
	r, err := conn.ReadMsg()
	if err != nil {
		return nil, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("rcode %s", dns.RcodeToString[r.Rcode])
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out, nil
}

// dnsConn is a UDP DNS connection to the name server from a client network.
func (s *globalScenario) dnsConn(client string) *dns.Conn {
	s.t.Helper()
	c, err := regiontest.DialIn(context.Background(), s.clients[client].Netns, "udp", s.ns)
	if err != nil {
		s.t.Fatalf("dial the name server from %s: %v", client, err)
	}
	s.t.Cleanup(func() { c.Close() })
	return &dns.Conn{Conn: c}
}

// dig runs Debian's dig in a client network and returns the A records it prints.
func (s *globalScenario) dig(client string, extra ...string) (string, error) {
	host, port, _ := net.SplitHostPort(s.ns)
	args := append([]string{"netns", "exec", s.clients[client].Netns, "dig", "@" + host, "-p", port, globalHost, "A", "+short", "+tries=2", "+time=1"}, extra...)
	out, err := exec.Command("ip", args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// goLookup resolves the hostname with Go's own resolver in a client network.
func (s *globalScenario) goLookup(client string) (string, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return regiontest.DialIn(ctx, s.clients[client].Netns, network, s.ns)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	addrs, err := r.LookupHost(ctx, globalHost)
	return strings.Join(addrs, ","), err
}

// expect waits until dig and Go's resolver in a client network (dig with extra flags) both answer
// the region's load balancer address.
func (s *globalScenario) expect(client, region, why string, extra ...string) {
	s.t.Helper()
	want := s.lbs[region]
	s.waitFor(30*time.Second, 200*time.Millisecond, func() string {
		got, err := s.dig(client, extra...)
		if err != nil || got != want {
			return fmt.Sprintf("%s: dig from %s %v answered %q (%v), want region %s's %s", why, client, extra, got, err, region, want)
		}
		if len(extra) == 0 {
			got, err = s.goLookup(client)
			if err != nil || got != want {
				return fmt.Sprintf("%s: Go's resolver in %s answered %q (%v), want region %s's %s", why, client, got, err, region, want)
			}
		}
		return ""
	})
	by := "dig and Go's resolver"
	if len(extra) > 0 {
		by = "dig " + strings.Join(extra, " ")
	}
	s.t.Logf("%s: %s gets region %s (%s) from %s", why, client, region, want, by)
}

// TestIntegrationGlobal routes real DNS clients (dig and Go's resolver) in two client networks to
// a fleet's regions by each policy of spec.global, then partitions the primary region under load:
// DNS withdraws it within seconds and brings it back when the link returns, while clients of the
// front door lose no idempotent request. Its figures line is make bench-global's.
func TestIntegrationGlobal(t *testing.T) {
	s := startGlobalScenario(t)
	var withdraw, back time.Duration
	var frontFailed int
	var frontFailover time.Duration
	defer func() {
		t.Logf("global: dns_withdraw_s=%.2f dns_return_s=%.2f front_failed_requests=%d front_failover_ms=%d",
			withdraw.Seconds(), back.Seconds(), frontFailed, frontFailover.Milliseconds())
	}()
	run := func(name string, step func(t *testing.T)) { s.subtest(t, name, step) }
	run("failover", func(t *testing.T) {
		s.expect(westNet, nearRegion, "failover")
		s.expect(eastNet, nearRegion, "failover")
	})
	run("weighted", s.weighted)
	run("geo", s.geo)
	run("latency", s.latency)
	run("partition", func(t *testing.T) { withdraw, back, frontFailed, frontFailover = s.partition(t) })
}

// weighted: weights 3:1 spread 10,000 client subnets (EDNS Client Subnet) within 2 points of
// 75%/25%, and a client network always gets the same region.
func (s *globalScenario) weighted(t *testing.T) {
	s.applyGlobal(fmt.Sprintf("    policy: weighted\n    weights: {%s: 3, %s: 1}\n", nearRegion, farRegion))
	conn := s.dnsConn(westNet)
	s.waitFor(30*time.Second, 200*time.Millisecond, func() string {
		// The routes are followed every 250 ms: wait until the spread is the weighted one.
		got := map[string]int{}
		for i := range 200 {
			a, err := s.query(conn, netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(i >> 8), byte(i), 0}), 24))
			if err != nil || len(a) != 1 {
				return fmt.Sprintf("query: %v %v", a, err)
			}
			got[a[0]]++
		}
		if got[s.lbs[farRegion]] == 0 || got[s.lbs[nearRegion]] == 0 {
			return fmt.Sprintf("answers over 200 subnets %v: not weighted yet", got)
		}
		return ""
	})
	const n = 10000
	counts := map[string]int{}
	for i := range n {
		a, err := s.query(conn, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24))
		if err != nil || len(a) != 1 {
			t.Fatalf("query %d: %v %v", i, a, err)
		}
		counts[a[0]]++
	}
	share := float64(counts[s.lbs[nearRegion]]) / n
	t.Logf("weighted 3:1 over %d client subnets: region %s %d (%.2f%%), region %s %d", n, nearRegion, counts[s.lbs[nearRegion]], 100*share, farRegion, counts[s.lbs[farRegion]])
	if math.Abs(share-0.75) > 0.02 {
		t.Errorf("region %s got %.2f%% of %d client subnets, want 75%% within 2 points", nearRegion, 100*share, n)
	}
	// One network, one region: dig and Go's resolver from each client network agree with
	// themselves and with each other.
	for _, c := range []string{westNet, eastNet} {
		first, err := s.dig(c)
		if err != nil || net.ParseIP(first) == nil {
			t.Fatalf("dig from %s: %q %v", c, first, err)
		}
		for range 5 {
			if again, _ := s.dig(c); again != first {
				t.Errorf("dig from %s answered %q, then %q: a client network must not be bounced between regions", c, first, again)
			}
			if g, err := s.goLookup(c); err != nil || g != first {
				t.Errorf("Go's resolver in %s answered %q (%v), dig %q", c, g, err, first)
			}
		}
	}
}

// geo: a CIDR map sends each client network to its region, by the resolver's (here the client's)
// address, and by EDNS Client Subnet when the query carries one.
func (s *globalScenario) geo(t *testing.T) {
	s.applyGlobal(fmt.Sprintf("    policy: geo\n    geo: {cidrs: {%q: %s, %q: %s}, default: %s}\n",
		s.clients[westNet].Network, nearRegion, s.clients[eastNet].Network, farRegion, nearRegion))
	s.expect(westNet, nearRegion, "geo by resolver address")
	s.expect(eastNet, farRegion, "geo by resolver address")
	eastSubnet := netip.MustParsePrefix(s.clients[eastNet].Network)
	s.expect(westNet, farRegion, "geo by client subnet", "+subnet="+eastSubnet.String())
	s.expect(eastNet, nearRegion, "geo by client subnet", "+subnet=192.0.2.0/24")
}

// latency: after some traffic from each client network to both regions, each network gets the
// region its own connections found nearest: west eu, east us.
func (s *globalScenario) latency(t *testing.T) {
	s.applyGlobal("    policy: latency\n")
	for _, c := range []string{westNet, eastNet} {
		for _, region := range []string{nearRegion, farRegion} {
			// The load lasts until the answers are checked, so that the round trips keep being
			// measured: an early one taken while the machine was busy is smoothed away.
			l := startLoadWith(func() *http.Client { return regiontest.HTTPClient(s.clients[c].Netns, 5*time.Second) }, s.url(region), 2, pace, 90*time.Second)
			defer l.finish()
		}
	}
	start := time.Now()
	cfg, err := client.LoadConfig(filepath.Join(s.dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	// Both regions' load balancers have measured both client networks.
	s.waitFor(30*time.Second, 250*time.Millisecond, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		rtts, err := client.New(cfg).ClientRTTs(ctx)
		if err != nil {
			return err.Error()
		}
		got := map[string]float64{}
		for _, r := range rtts {
			got[r.Network+" "+r.Region] = r.SRTTms
		}
		for _, c := range []string{westNet, eastNet} {
			for _, region := range []string{nearRegion, farRegion} {
				if _, ok := got[s.clients[c].Network+" "+region]; !ok {
					return fmt.Sprintf("region %s has not measured client network %s (%s) yet: %v", region, c, s.clients[c].Network, got)
				}
			}
		}
		t.Logf("round trips measured by the regions' load balancers: %v", got)
		return ""
	})
	s.expect(westNet, nearRegion, "latency")
	s.expect(eastNet, farRegion, "latency")
	t.Logf("latency: each client network answered its nearest region %.1f s after its first requests", time.Since(start).Seconds())
}

// partition cuts region eu's link under load, with policy failover (eu first): a client in west
// polling every 100 ms sees eu leave the answers and come back; clients of the front door in west
// lose no request. It returns how long DNS took to withdraw eu after the cut and to answer it again
// after the link returned, the front door's failed requests, and how long after the cut the front
// door first answered from us.
func (s *globalScenario) partition(t *testing.T) (withdraw, back time.Duration, frontFailed int, frontFailover time.Duration) {
	s.applyGlobal("    policy: failover\n")
	s.expect(westNet, nearRegion, "failover")
	cfg, err := client.LoadConfig(filepath.Join(s.dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	var front string
	s.waitFor(time.Minute, 250*time.Millisecond, func() string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		fd, err := client.New(cfg).FrontDoor(ctx)
		if err != nil || !fd.Synced || fd.Address == "" {
			return fmt.Sprintf("front door not synced: %+v %v", fd, err)
		}
		front = "http://" + net.JoinHostPort(fd.Address, strconv.Itoa(s.lbPort)) + "/"
		return ""
	})
	regionOf := map[string]string{} // the fleet's instances stay the same throughout
	for _, in := range s.instances() {
		regionOf[in.Metadata.Name] = in.Spec.Region
	}
	fl := startLoadWith(func() *http.Client { return regiontest.HTTPClient(s.clients[westNet].Netns, 5*time.Second) }, front, paceClients, pace, 3*time.Minute)
	defer fl.finish()
	// answeredFrom waits for n answers from region through the front door after from.
	answeredFrom := func(region string, from time.Time, n int) {
		s.waitFor(30*time.Second, 100*time.Millisecond, func() string {
			got := 0
			for _, r := range fl.since(0) {
				if r.err == nil && r.at.After(from) && regionOf[r.instance] == region {
					got++
				}
			}
			if got < n {
				return fmt.Sprintf("%d answers from region %s through the front door since %s, want %d", got, region, from.Format(time.StampMilli), n)
			}
			return ""
		})
	}
	s.waitFor(30*time.Second, 50*time.Millisecond, func() string {
		if n := len(fl.since(0)); n < 100 {
			return fmt.Sprintf("%d answers through the front door before the partition", n)
		}
		return ""
	})

	// The poller: a client in west asking every 100 ms.
	conn := s.dnsConn(westNet)
	type answer struct {
		at   time.Time
		addr string
	}
	answers := make(chan answer, 1024)
	stopPoll := make(chan struct{})
	go func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopPoll:
				close(answers)
				return
			case <-tick.C:
			}
			a, err := s.query(conn, netip.Prefix{})
			if err == nil && len(a) == 1 {
				answers <- answer{time.Now(), a[0]}
			}
		}
	}()
	defer func() {
		select {
		case <-stopPoll:
		default:
			close(stopPoll)
		}
	}()
	waitAnswer := func(region string, timeout time.Duration) (time.Time, bool) {
		deadline := time.After(timeout)
		for {
			select {
			case a := <-answers:
				if a.addr == s.lbs[region] {
					return a.at, true
				}
			case <-deadline:
				return time.Time{}, false
			}
		}
	}

	out, err := s.herd("chaos", "partition-region", nearRegion, "--duration", "2m")
	if err != nil {
		t.Fatalf("herd chaos partition-region: %v\n%s", err, out)
	}
	cut := time.Now()
	name := strings.TrimSuffix(strings.Fields(out)[0], ":")
	name = strings.TrimPrefix(name, "chaos/")
	at, ok := waitAnswer(farRegion, 30*time.Second)
	if !ok {
		t.Fatalf("DNS still answers region %s 30 s after its partition", nearRegion)
	}
	withdraw = at.Sub(cut)
	t.Logf("DNS answered region %s instead of the partitioned %s %.2f s after the partition", farRegion, nearRegion, withdraw.Seconds())
	if withdraw > 3*time.Second {
		t.Errorf("DNS withdrew the partitioned region after %.2f s, want within 3 s", withdraw.Seconds())
	}
	// herd describe shows the region out as DNS and the front door see it.
	s.waitFor(10*time.Second, 250*time.Millisecond, func() string {
		out, err := s.herd("describe", "fleet", regionsFleet)
		if err != nil {
			return "herd describe: " + err.Error()
		}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "region" && f[1] == nearRegion+":" && !strings.HasPrefix(f[2], string(lb.StateHealthy)) {
				t.Logf("herd describe fleet %s under the partition:\n%s", regionsFleet, out)
				return ""
			}
		}
		return "herd describe does not show the front door's verdict on region " + nearRegion + ":\n" + out
	})
	// The front door's clients have moved to us: a few seconds of answers from there, then the
	// link returns.
	answeredFrom(farRegion, cut, 200)
	if out, err := s.herd("chaos", "stop", name); err != nil {
		t.Fatalf("herd chaos stop %s: %v\n%s", name, err, out)
	}
	healed := time.Now()
	at, ok = waitAnswer(nearRegion, 30*time.Second)
	if !ok {
		t.Fatalf("DNS does not answer region %s 30 s after its link returned", nearRegion)
	}
	back = at.Sub(healed)
	t.Logf("DNS answered region %s again %.2f s after its link returned", nearRegion, back.Seconds())
	if back > 5*time.Second {
		t.Errorf("DNS brought the region back after %.2f s, want within 5 s", back.Seconds())
	}
	// The front door takes its nearest region back.
	answeredFrom(nearRegion, healed, 50)
	rs := fl.finish()
	for _, r := range rs {
		if r.err == nil && r.at.After(cut) && regionOf[r.instance] == farRegion {
			frontFailover = r.at.Sub(cut)
			break
		}
	}
	failed, total := failures(t, "front door", rs, cut.Add(-5*time.Second), time.Now())
	t.Logf("front door under the partition: %d of %d requests failed; first answer from region %s %d ms after the cut",
		failed, total, farRegion, frontFailover.Milliseconds())
	if failed != 0 {
		t.Errorf("%d of %d GETs through the front door failed while region %s was partitioned, want 0", failed, total, nearRegion)
	}
	return withdraw, back, failed, frontFailover
}
