// Command dns benchmarks herd's authoritative DNS server (herd dns) against CoreDNS (v1.12.0,
// kubeadm v1.33's, pinned by coredns/go.mod, built with its file plugin) and Knot (Debian's
// knotd) serving the same zone on loopback (make bench-dns). Each server is pinned to -server-cpu (taskset); dnsperf and this
// program's latency probe run on -load-cpu. Every process runs at nice -15 (-nice).
//
//  1. saturation: dnsperf for -duration per server and round, servers in rotating order; the
//     median queries per second of each is reported, with the server's CPU time per query;
//  2. latency: a fixed rate of half CoreDNS's median saturation rate for -latency-duration per
//     server and round, -latency-rounds rounds; the median p99 of each is reported
//     (coordinated-omission safe: a query counts from when it was due; a lost one counts as 1 s).
//
// Everything it starts is stopped on exit. The last line is:
//
//	dns: herd_qps=<int> coredns_qps=<int> knot_qps=<int> qps_vs_coredns=<float> p99_vs_coredns=<float>
//
// where p99_vs_coredns is herd's p99 over CoreDNS's (below 1: herd answers faster).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

const pinnedEnv = "HERD_BENCH_DNS_PINNED"

// benchNice is the niceness this program runs itself at, which every process it starts inherits,
// so that other work on the machine disturbs the figures less (as root it is honoured).
var benchNice = "-15"

func logf(format string, args ...any) { fmt.Fprintf(os.Stderr, "bench-dns: "+format+"\n", args...) }

func main() {
	herd := flag.String("herd", "bin/herd", "the herd binary (make build)")
	rounds := flag.Int("rounds", 3, "rounds of saturation; the median is reported")
	duration := flag.Duration("duration", 8*time.Second, "length of each saturation round")
	latRounds := flag.Int("latency-rounds", 7, "rounds of the fixed-rate latency probe; the median p99 is reported")
	latDuration := flag.Duration("latency-duration", 4*time.Second, "length of each latency round")
	serverCPU := flag.String("server-cpu", "0", "CPU every server is pinned to")
	loadCPU := flag.String("load-cpu", "1", "CPU of dnsperf and the latency probe")
	clients := flag.Int("clients", 4, "dnsperf clients (sockets)")
	outstanding := flag.Int("outstanding", 200, "dnsperf queries outstanding")
	flag.StringVar(&benchNice, "nice", benchNice, "niceness of every process of the benchmark")
	flag.Parse()

	// The latency probe runs in this process: pin it to the load CPU by running again under taskset.
	if os.Getenv(pinnedEnv) == "" {
		taskset, err := exec.LookPath("taskset")
		if err != nil {
			fail(errors.New("taskset not found: install util-linux"))
		}
		self, err := os.Executable()
		if err != nil {
			fail(err)
		}
		os.Setenv(pinnedEnv, "1")
		nice, err := exec.LookPath("nice")
		if err != nil {
			fail(err)
		}
		fail(syscall.Exec(nice, append([]string{"nice", "-n", benchNice, taskset, "-c", *loadCPU, self}, os.Args[1:]...), os.Environ()))
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	line, err := run(ctx, *herd, *rounds, *duration, *latRounds, *latDuration, *serverCPU, *loadCPU, *clients, *outstanding)
	if err != nil {
		fail(err)
	}
	fmt.Println(line)
}

func fail(err error) {
	logf("%v", err)
	os.Exit(1)
}

func run(ctx context.Context, herd string, rounds int, d time.Duration, latRounds int, latD time.Duration, serverCPU, loadCPU string, clients, outstanding int) (string, error) {
	for _, tool := range []string{"dnsperf", "knotd", "go"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "", fmt.Errorf("%s not found: run hack/install-deps.sh (Debian packages dnsperf and knot)", tool)
		}
	}
	if _, err := os.Stat(herd); err != nil {
		return "", fmt.Errorf("-herd %s: %w (make build)", herd, err)
	}
	herd, _ = filepath.Abs(herd)
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	coredns, err := buildCoreDNS(ctx, filepath.Join(cache, "herd", "bench"))
	if err != nil {
		return "", err
	}
	work, err := os.MkdirTemp("", "herd-bench-dns-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := os.WriteFile(filepath.Join(work, "herd.test.zone"), []byte(zoneFile()), 0o600); err != nil {
		return "", err
	}

	names := []string{"herd", "coredns", "knot"}
	ports := map[string]int{"herd": 18153, "coredns": 18154, "knot": 18155}
	servers := map[string]*server{}
	defer func() {
		for _, s := range servers {
			s.stop()
		}
	}()
	for _, name := range names {
		var argv []string
		switch name {
		case "herd":
			argv, err = herdArgs(herd, work, ports[name])
		case "coredns":
			argv, err = corednsArgs(coredns, work, ports[name])
		case "knot":
			argv, err = knotArgs(work, ports[name])
		}
		if err != nil {
			return "", err
		}
		s, err := startServer(ctx, name, ports[name], serverCPU, work, argv)
		if err != nil {
			return "", err
		}
		servers[name] = s
	}

	qps := map[string][]float64{}
	cpuPer := map[string][]time.Duration{}
	for r := range rounds {
		for i := range names {
			name := names[(i+r)%len(names)]
			q, c, err := saturate(ctx, servers[name], loadCPU, work, d, clients, outstanding)
			if err != nil {
				return "", err
			}
			logf("round %d: %-8s %8.0f queries/s, %.2f µs CPU per query", r+1, name, q, float64(c)/1e3)
			qps[name] = append(qps[name], q)
			cpuPer[name] = append(cpuPer[name], c)
		}
	}
	rate := median(qps["coredns"]) / 2
	p99 := map[string][]time.Duration{}
	for r := range latRounds {
		for i := range names {
			name := names[(i+r)%len(names)]
			p, lost, err := latency(servers[name], rate, latD)
			if err != nil {
				return "", err
			}
			logf("round %d: %-8s p99 %v at %.0f queries/s (%d lost)", r+1, name, p, rate, lost)
			p99[name] = append(p99[name], p)
		}
	}
	var table strings.Builder
	fmt.Fprintf(&table, "%-8s %12s %16s %12s\n", "server", "queries/s", "CPU/query (µs)", "p99")
	for _, name := range names {
		fmt.Fprintf(&table, "%-8s %12.0f %16.2f %12v\n", name, median(qps[name]), float64(median(cpuPer[name]))/1e3, median(p99[name]))
	}
	fmt.Print(table.String())
	return fmt.Sprintf("dns: herd_qps=%d coredns_qps=%d knot_qps=%d qps_vs_coredns=%.2f p99_vs_coredns=%.2f",
		int(median(qps["herd"])), int(median(qps["coredns"])), int(median(qps["knot"])),
		median(qps["herd"])/median(qps["coredns"]),
		float64(median(p99["herd"]))/float64(median(p99["coredns"]))), nil
}
