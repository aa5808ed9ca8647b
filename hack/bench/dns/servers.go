package main

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/global/routes"
)

// The zone every server serves: the same names, the same answers' sizes.
const zone = "herd.test."

var hosts = []struct {
	name   string
	policy v1alpha1.RoutingPolicy
	addr   string // the zone file's answer; herd's is one of the regions' by policy
}{
	{"fo", v1alpha1.PolicyFailover, "10.216.0.1"},
	{"w", v1alpha1.PolicyWeighted, "10.216.0.2"},
	{"geo", v1alpha1.PolicyGeo, "10.216.0.3"},
	{"lat", v1alpha1.PolicyLatency, "10.216.0.1"},
}

// queries is dnsperf's input: answers, a NODATA, an NXDOMAIN and the SOA, as resolvers ask.
var queries = []string{
	"fo.herd.test A", "w.herd.test A", "geo.herd.test A", "lat.herd.test A",
	"fo.herd.test A", "w.herd.test A", "fo.herd.test AAAA", "nope.herd.test A", "herd.test SOA",
}

func zoneFile() string {
	var b strings.Builder
	fmt.Fprintf(&b, "$ORIGIN %s\n$TTL 5\n@ 60 IN SOA ns1.herd.test. hostmaster.herd.test. 1 60 10 3600 5\n@ 3600 IN NS ns1.herd.test.\nns1 3600 IN A 10.0.0.53\n", zone)
	for _, h := range hosts {
		fmt.Fprintf(&b, "%s IN A %s\n", h.name, h.addr)
	}
	return b.String()
}

// routesTable is herd's input for the same zone: three healthy regions, each hostname with its
// policy, so that herd's answers go through the policy code.
func routesTable() routes.Table {
	regions := func() []routes.RegionRoute {
		var out []routes.RegionRoute
		for i, name := range []string{"eu", "us", "ap"} {
			out = append(out, routes.RegionRoute{Name: name, Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 216, 0, byte(i + 1)})},
				Weight: int32(3 - i), Ready: 2, MinReady: 1, Reachable: true, Healthy: true, Why: "bench"})
		}
		return out
	}
	t := routes.Table{RTT: map[netip.Prefix]map[string]time.Duration{
		netip.MustParsePrefix("127.0.0.0/24"): {"eu": 40 * time.Millisecond, "us": 10 * time.Millisecond},
	}}
	for _, h := range hosts {
		r := routes.Route{Fleet: h.name, Hostname: h.name + ".herd.test", Policy: h.policy, TTLSeconds: 5, Regions: regions(), GeoDefault: "eu"}
		if h.policy == v1alpha1.PolicyGeo || h.policy == v1alpha1.PolicyLatency {
			r.Geo = []routes.GeoRule{{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Region: "us"}}
			r.LatencyFallback = v1alpha1.PolicyGeo
		}
		t.Routes = append(t.Routes, r)
	}
	return t
}

// server is one DNS server under test, started pinned to one CPU.
type server struct {
	name string
	port int
	cmd  *exec.Cmd
}

func startServer(ctx context.Context, name string, port int, cpu, work string, argv []string) (*server, error) {
	logf, err := os.Create(filepath.Join(work, name+".log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.CommandContext(ctx, "taskset", append([]string{"-c", cpu}, argv...)...) // inherits our niceness
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	s := &server{name: name, port: port, cmd: cmd}
	if err := s.waitAnswering(10 * time.Second); err != nil {
		s.stop()
		log, _ := os.ReadFile(filepath.Join(work, name+".log"))
		return nil, fmt.Errorf("%s: %w\n%s", name, err, log)
	}
	return s, nil
}

// waitAnswering waits until the server answers fo.herd.test with an address.
func (s *server) waitAnswering(timeout time.Duration) error {
	c := &dns.Client{Timeout: 200 * time.Millisecond}
	m := new(dns.Msg).SetQuestion("fo.herd.test.", dns.TypeA)
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		r, _, err := c.Exchange(m, fmt.Sprintf("127.0.0.1:%d", s.port))
		if err == nil && len(r.Answer) == 1 {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("answer %v", r)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("not answering on port %d after %s: %v", s.port, timeout, last)
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
}

// herdArgs runs `herd dns` on the routes table.
func herdArgs(herd, work string, port int) ([]string, error) {
	data, err := json.Marshal(routesTable())
	if err != nil {
		return nil, err
	}
	file := filepath.Join(work, "routes.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		return nil, err
	}
	return []string{herd, "dns", "--zone", zone, "--listen", fmt.Sprintf("127.0.0.1:%d", port),
		"--nameserver", "ns1.herd.test=10.0.0.53", "--routes-file", file, "--log-level", "warn"}, nil
}

// corednsArgs runs CoreDNS with the file plugin alone on the zone file.
func corednsArgs(bin, work string, port int) ([]string, error) {
	corefile := fmt.Sprintf("%s:%d {\n    bind 127.0.0.1\n    file %s\n}\n", zone, port, filepath.Join(work, "herd.test.zone"))
	file := filepath.Join(work, "Corefile")
	if err := os.WriteFile(file, []byte(corefile), 0o600); err != nil {
		return nil, err
	}
	return []string{bin, "-conf", file, "-quiet"}, nil
}

// knotArgs runs Knot with one UDP and one TCP worker on the zone file.
func knotArgs(work string, port int) ([]string, error) {
	dir := filepath.Join(work, "knot")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`server:
    rundir: "%[1]s"
    listen: 127.0.0.1@%[2]d
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
database:
    storage: "%[1]s"
log:
  - target: stderr
    any: warning
template:
  - id: default
    storage: "%[3]s"
zone:
  - domain: %[4]s
    file: herd.test.zone
`, dir, port, work, zone)
	file := filepath.Join(work, "knot.conf")
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		return nil, err
	}
	knotd, err := exec.LookPath("knotd")
	if err != nil {
		return nil, fmt.Errorf("knotd not found: run hack/install-deps.sh (Debian package knot)")
	}
	return []string{knotd, "-c", file}, nil
}

// corednsVersion is the CoreDNS the bench builds, pinned by the go.mod and go.sum of
// coredns/ (the version kubeadm v1.33 installs as cluster DNS).
const corednsVersion = "v1.12.0"

// corednsModule is the pinned module's go.mod and go.sum.
//
//go:embed coredns/go.mod.txt coredns/go.sum.txt
var corednsModule embed.FS

// corednsMain is the CoreDNS the bench builds: the pinned module with the file plugin, which
// serves a zone file as authoritative servers do. -mod=readonly: the go.sum pins every module it
// needs.
const corednsMain = `// Command coredns is CoreDNS with the file plugin, for make bench-dns.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/file"
)

func init() { dnsserver.Directives = []string{"bind", "file"} }

func main() { coremain.Run() }
`

// buildCoreDNS builds CoreDNS at the pinned version with the file plugin into the cache
// directory, once.
func buildCoreDNS(ctx context.Context, cacheDir string) (string, error) {
	dir := filepath.Join(cacheDir, "coredns-"+corednsVersion+"-file")
	bin := filepath.Join(dir, "coredns")
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	files := map[string][]byte{"main.go": []byte(corednsMain)}
	for _, name := range []string{"go.mod", "go.sum"} {
		data, err := corednsModule.ReadFile("coredns/" + name + ".txt")
		if err != nil {
			return "", err
		}
		files[name] = data
	}
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), data, 0o644); err != nil {
			return "", err
		}
	}
	logf("building CoreDNS %s with the file plugin (coredns/go.mod)", corednsVersion)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin+".tmp", ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=-mod=readonly", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building CoreDNS: %w\n%s", err, out)
	}
	return bin, os.Rename(bin+".tmp", bin)
}
