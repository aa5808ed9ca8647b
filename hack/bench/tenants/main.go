// Command tenants benchmarks tenancy (make bench-tenants), in two parts.
//
// On the fake provider: herd's controller, lbsync and load balancer as herd up wires them, one
// fleet with 5,000 declared tenants and a warm pool, every fake instance's address (127.x.y.z)
// answered by one backend (a process of its own) that names the address it was reached on, so each
// answer says which instance gave it.
//
//  1. Traffic to all tenants: every tenant's first request claims a warm instance (or a new one)
//     and is held until it serves, then more requests; each answer's instance is checked against
//     the tenant's instances in the store (cross_tenant_answers).
//  2. A new tenant's first request with the warm pool full (printed: no boot is in it).
//  3. The same load balancer, the same targets and load, with and without tenancy: requests per
//     second of each, interleaved rounds, median ratio (lb_rps_vs_untenanted).
//
// On real local instances: the end-to-end scenario TestIntegrationTenancy (run by -e2e, the
// bench-e2e command), whose figures line gives a new tenant's first request answered by the warm
// pool's one booted instance (cold_first_answer_ms), the cross-tenant answers it saw during a
// rolling update and a kill, and the isolation figure (tenant b's p99 with tenant a flooded,
// against alone).
//
// The load balancer keeps a health-check and a proxied keep-alive connection per target: 5,000
// targets are about 10,000 open files, and as many for the backend's ends of them, more than a
// ulimit -n of 20,000 holds in one process. So the backend runs in a process of its own (this
// command again, with -backend), and the comparison starts once the first load balancer has
// closed its connections.
//
// The last line is:
//
//	tenants: tenants=<int> cross_tenant_answers=<int> cold_first_answer_ms=<float> lb_rps_vs_untenanted=<float>
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbsync"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/memory"
)

func main() {
	n := flag.Int("tenants", 5000, "tenants of the fleet")
	port := flag.Int("port", 18480, "the fleet's listener port; the backend listens on the next one, the comparison on the two after")
	warmPool := flag.Int("warm-pool", 200, "the fleet's warm pool")
	workers := flag.Int("workers", 64, "concurrent clients")
	rounds := flag.Int("rounds", 3, "rounds of each load balancer configuration")
	roundFor := flag.Duration("round", 2*time.Second, "length of a round")
	e2e := flag.String("e2e", "", "the bench-e2e command, to run the part on real instances (TestIntegrationTenancy); empty: the fake provider only")
	backend := flag.Int("backend", 0, "serve the fake backend on this port and nothing else (the benchmark starts itself so)")
	flag.Parse()
	if *backend > 0 {
		serveBackend(*backend)
		return
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// Each target: a health-check and a proxied connection; the backend holds the other ends in a
	// process of its own.
	raiseOpenFiles(uint64(*n+*warmPool)*2 + 4096)

	backendPort := *port + 1
	stopBackend := startBackend(backendPort)
	defer stopBackend()
	tenants := make([]string, *n)
	for i := range tenants {
		tenants[i] = fmt.Sprintf("t%04d", i)
	}
	cross, owners, fakeCold := routeAll(tenants, *port, *warmPool, *workers, logger)
	fmt.Printf("open files after routing: %d\n", openFiles())

	// 3. The same load balancer, the same targets, with and without tenancy.
	ratio := compare(owners, tenants, backendPort, *port+2, *workers, *rounds, *roundFor, logger)
	fmt.Printf("open files after the comparison: %d\n", openFiles())

	cold := fakeCold
	if *e2e != "" {
		rf := runE2E(*e2e)
		cold = rf.cold
		cross += rf.cross
	} else {
		fmt.Println("no -e2e: cold_first_answer_ms is the fake provider's, without a boot or a real instance in it")
	}
	fmt.Printf("tenants: tenants=%d cross_tenant_answers=%d cold_first_answer_ms=%.1f lb_rps_vs_untenanted=%.3f\n", len(tenants), cross, cold, ratio)
}

// routeAll runs the fleet with herd's controller and load balancer on the fake provider, sends
// traffic to every tenant (1) and a new tenant's first request (2), then stops them. It returns
// the cross-tenant answers, each instance address's tenant, and the new tenant's first answer
// in milliseconds.
func routeAll(tenants []string, port, warmPool, workers int, logger *slog.Logger) (int, map[string]string, float64) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	backendPort := port + 1
	bal := lb.New(lb.Options{Logger: logger})
	balDone := make(chan struct{})
	go func() { _ = bal.Start(ctx); close(balDone) }()
	sink := lbsync.New(bal, "127.0.0.1", logger)
	st := memory.New()
	fp, err := fake.New(fake.Options{})
	if err != nil {
		log.Fatal(err)
	}
	ctrl, err := controller.New(controller.Options{
		Store: st, Providers: map[string]provider.Provider{fake.Name: fp}, Logger: logger,
		Targets: sink, TenantActivity: bal, PollInterval: 50 * time.Millisecond, MaxConcurrentCreates: 1000,
	})
	if err != nil {
		log.Fatal(err)
	}
	bal.SetTenantClaimer(ctrl.ClaimTenant)
	ctrlDone := make(chan struct{})
	go func() { _ = ctrl.Start(ctx); close(ctrlDone) }()

	f := &v1alpha1.Fleet{
		TypeMeta: v1alpha1.TypeMeta{APIVersion: v1alpha1.GroupVersion, Kind: v1alpha1.KindFleet},
		Metadata: v1alpha1.ObjectMeta{Name: "saas", Generation: 1},
		Spec: v1alpha1.FleetSpec{
			Image:       "img",
			Listeners:   []v1alpha1.Listener{{Port: int32(port), InstancePort: int32(backendPort)}},
			HealthCheck: v1alpha1.HealthCheck{Interval: &v1alpha1.Duration{Duration: 5 * time.Second}},
			Tenancy: &v1alpha1.Tenancy{Key: "header:X-Tenant", Tenants: append(slices.Clone(tenants), "newcomer"),
				WarmPool: ptr(int32(warmPool)), IdleAfter: &v1alpha1.Duration{}},
		},
	}
	v1alpha1.SetFleetDefaults(f, fake.Name)
	if errs := v1alpha1.ValidateFleet(f); len(errs) > 0 {
		log.Fatal(errs)
	}
	op, err := store.PutOp(store.Fleets, f)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := st.Txn(ctx, op); err != nil {
		log.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", port)
	waitFor("warm pool", func() bool { return len(warmOf(ctx, st)) == warmPool })

	// 1. Traffic to every tenant, three requests each, in a shuffled order.
	start := time.Now()
	var order []string
	for range 3 {
		order = append(order, tenants...)
	}
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	answers := make([]answer, len(order))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			c := client()
			defer c.CloseIdleConnections()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(order) {
					return
				}
				answers[i] = ask(c, url, order[i])
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	owner := ownersOf(ctx, st)
	cross, failed := 0, 0
	for i, a := range answers {
		switch {
		case a.code != http.StatusOK:
			failed++
		case owner[a.addr] != order[i]:
			cross++
		}
	}
	fmt.Printf("routing: %d tenants, %d requests in %s (first ones claimed and held), %d not 200, %d cross-tenant answers, %d instances\n",
		len(tenants), len(order), took.Round(time.Millisecond), failed, cross, len(owner))
	if failed > 0 {
		log.Fatalf("%d requests were not answered 200", failed)
	}

	// 2. A new tenant, the warm pool full.
	waitFor("warm pool refilled", func() bool { return len(warmOf(ctx, st)) == warmPool })
	t0 := time.Now()
	a := ask(client(), url, "newcomer")
	cold := time.Since(t0)
	owner = ownersOf(ctx, st)
	if a.code != http.StatusOK || owner[a.addr] != "newcomer" {
		log.Fatalf("newcomer: %d from %s", a.code, a.addr)
	}
	fmt.Printf("cold (fake provider): a new tenant's first request answered in %.1f ms from a warm instance: the claim, a record write and the load balancer's first check, no boot\n", ms(cold))

	// Stopped, so that their connections are closed before the comparison opens as many.
	cancel()
	<-ctrlDone
	<-balDone
	return cross, owner, ms(cold)
}

// realFigures are what TestIntegrationTenancy measured.
type realFigures struct {
	cold  float64
	cross int
}

// runE2E runs TestIntegrationTenancy through bench-e2e, shows its output and reads its figures
// line. On SIGINT or SIGTERM it waits for bench-e2e, which has the test clean up first.
func runE2E(bin string) realFigures {
	fmt.Println("real instances: TestIntegrationTenancy (minutes)")
	cmd := exec.Command(bin, "-test", "TestIntegrationTenancy", "-figures", "tenancy", "-tags", "tenancy")
	cmd.Stderr = os.Stderr
	var out bytes.Buffer
	cmd.Stdout = io.MultiWriter(os.Stdout, &out)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	if err := cmd.Wait(); err != nil {
		log.Fatalf("TestIntegrationTenancy: %v", err)
	}
	var f realFigures
	var ratio float64
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	if _, err := fmt.Sscanf(last, "tenancy: cold_first_answer_ms=%g cross_tenant_answers=%d isolation_p99_ratio=%g", &f.cold, &f.cross, &ratio); err != nil {
		log.Fatalf("TestIntegrationTenancy's figures %q: %v", last, err)
	}
	fmt.Printf("isolation: tenant b's p99 with tenant a flooded is %.2fx its p99 alone (real instances)\n", ratio)
	return f
}

// startBackend runs this command again as the fake backend (-backend), so that the connections'
// other ends count against its open-files limit, not this one's, and waits until it listens.
func startBackend(port int) (stop func()) {
	self, err := os.Executable()
	if err != nil {
		log.Fatal(err)
	}
	cmd := exec.Command(self, "-backend", fmt.Sprint(port))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // gone with this process, however it ends
	if err := cmd.Start(); err != nil {
		log.Fatal(err)
	}
	waitFor("the backend", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// raiseOpenFiles raises RLIMIT_NOFILE to want, if it is lower.
func raiseOpenFiles(want uint64) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Fatal(err)
	}
	if lim.Cur >= want {
		return
	}
	was := lim
	lim.Cur = want
	lim.Max = max(lim.Max, want)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		log.Fatalf("this benchmark needs about %d open files (a health-check and a proxied connection per target) and the limit is %d (hard %d): raising it failed: %v; run it with a higher ulimit -n, or with fewer -tenants",
			want, was.Cur, was.Max, err)
	}
	fmt.Printf("open files: limit raised from %d to %d\n", was.Cur, want)
}

// openFiles counts this process's open files.
func openFiles() int {
	fds, _ := os.ReadDir("/proc/self/fd")
	return len(fds)
}

type answer struct {
	code int
	addr string
}

func ask(c *http.Client, url, tenant string) answer {
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.Header.Set("X-Tenant", tenant)
	resp, err := c.Do(req)
	if err != nil {
		return answer{}
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return answer{code: resp.StatusCode, addr: resp.Header.Get("X-Instance")}
}

func client() *http.Client {
	return &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
}

// serveBackend answers on every loopback address with the address it was reached on: the fake
// provider gives each instance one of 127.0.0.0/8.
func serveBackend(port int) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		addr, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
		host, _, _ := net.SplitHostPort(addr.String())
		w.Header().Set("X-Instance", host)
		_, _ = io.WriteString(w, "ok\n")
	})
	log.Fatal(http.ListenAndServe(fmt.Sprintf("0.0.0.0:%d", port), h))
}

// ownersOf maps each instance address to its tenant ("" for the warm pool).
func ownersOf(ctx context.Context, st store.Store) map[string]string {
	insts, _, err := store.ListObjects[v1alpha1.Instance](ctx, st, store.Instances)
	if err != nil {
		log.Fatal(err)
	}
	out := map[string]string{}
	for _, in := range insts {
		if in.Status.Address != "" {
			out[in.Status.Address] = controller.TenantOf(in)
		}
	}
	return out
}

func warmOf(ctx context.Context, st store.Store) []string {
	insts, _, err := store.ListObjects[v1alpha1.Instance](ctx, st, store.Instances)
	if err != nil {
		log.Fatal(err)
	}
	var out []string
	for _, in := range insts {
		if controller.IsWarm(in) && in.Status.Phase == v1alpha1.PhaseReady {
			out = append(out, in.Metadata.Name)
		}
	}
	return out
}

// compare serves the tenants' instances on two listeners of one load balancer, one with tenancy and
// one without, and returns the median ratio of their requests per second over interleaved rounds.
func compare(owners map[string]string, tenants []string, backendPort, port, workers, rounds int, roundFor time.Duration, logger *slog.Logger) float64 {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ts []lb.Target
	for addr, tenant := range owners {
		if tenant != "" {
			ts = append(ts, lb.Target{ID: addr, Address: net.JoinHostPort(addr, fmt.Sprint(backendPort)), Tenant: tenant})
		}
	}
	hc := lb.HealthCheck{Disabled: true}
	tenanted := lb.Listener{Name: "bench/tenanted", Fleet: "bench", Address: fmt.Sprintf("127.0.0.1:%d", port), HealthCheck: hc,
		Tenancy: &lb.Tenancy{Key: lb.TenantByHeader, Header: "X-Tenant"}, Groups: []lb.TargetGroup{{Name: "v1", Targets: ts}}}
	plain := lb.Listener{Name: "bench/plain", Fleet: "bench", Address: fmt.Sprintf("127.0.0.1:%d", port+1), HealthCheck: hc,
		Groups: []lb.TargetGroup{{Name: "v1", Targets: ts}}}
	bal := lb.New(lb.Options{Logger: logger})
	if err := bal.Apply(lb.Config{Listeners: []lb.Listener{tenanted, plain}}); err != nil {
		log.Fatal(err)
	}
	go func() { _ = bal.Start(ctx) }()
	run := func(addr string) float64 {
		var done atomic.Int64
		deadline := time.Now().Add(roundFor)
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				c := client()
				defer c.CloseIdleConnections()
				for time.Now().Before(deadline) {
					if a := ask(c, "http://"+addr+"/", tenants[rand.IntN(len(tenants))]); a.code == http.StatusOK {
						done.Add(1)
					}
				}
			})
		}
		wg.Wait()
		return float64(done.Load()) / roundFor.Seconds()
	}
	var ratios []float64
	for r := range rounds {
		var with, without float64
		if r%2 == 0 {
			with, without = run(tenanted.Address), run(plain.Address)
		} else {
			without, with = run(plain.Address), run(tenanted.Address)
		}
		fmt.Printf("round %d: %.0f req/s with tenancy, %.0f without\n", r+1, with, without)
		ratios = append(ratios, with/without)
	}
	sort.Float64s(ratios)
	return ratios[len(ratios)/2]
}

func waitFor(what string, cond func() bool) {
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			log.Fatalf("%s: not after 2m", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ptr[T any](v T) *T { return &v }
