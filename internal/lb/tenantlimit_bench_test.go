//go:build unix

package lb

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// BenchmarkTenantPacing measures what a request of a tenant costs the process (load balancer,
// clients and target all in it) when the tenant is held to its rate, against the same requests
// unbounded: 16 keep-alive clients send back to back through a real listener.
//
//	go test ./internal/lb -run '^$' -bench TenantPacing -benchtime 3000x
//
// It reports CPU seconds per 1,000 requests and voluntary context switches (a thread going to
// sleep, each followed by a wake-up) per request, from getrusage: counts of this process's work,
// which other work on the machine does not change much, unlike the time it takes.
func BenchmarkTenantPacing(b *testing.B) {
	for _, bc := range []struct {
		name string
		rate float64
	}{{"unbounded", 0}, {"held_1000rps", 1000}} {
		b.Run(bc.name, func(b *testing.B) {
			be := newBackend(b, "a0", nil)
			l := httpListener(TargetGroup{Name: "v1", Targets: tenantTargets("a", be)})
			l.HealthCheck.Disabled = true
			l.Tenancy = &Tenancy{Key: TenantByHeader, Header: "X-Tenant", Tenants: []string{"a"},
				MaxInFlight: 4, RequestsPerSecond: bc.rate, MaxWait: Duration(time.Second)}
			if bc.rate == 0 {
				l.Tenancy.MaxInFlight = 0
			}
			lb := startLBWith(b, EngineFast, Config{Listeners: []Listener{l}}, slogTo(io.Discard))
			u := url(lb, "/")
			const clients = 16
			cs := make([]*http.Client, clients)
			for i := range cs {
				cs[i] = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
				// One request each first, so that connections are open before counting.
				if code := benchGet(b, cs[i], u); code != http.StatusOK {
					b.Fatalf("warm-up: %d", code)
				}
			}
			// Let the bucket fill again, so that every run starts from the same state.
			time.Sleep(200 * time.Millisecond)
			var left atomic.Int64
			left.Store(int64(b.N))
			var refused atomic.Int64
			before := usage(b)
			start := time.Now()
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, c := range cs {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						if code := benchGet(b, c, u); code != http.StatusOK {
							refused.Add(1)
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			took := time.Since(start)
			after := usage(b)
			cpu := (after.cpu - before.cpu).Seconds()
			n := float64(b.N)
			b.ReportMetric(cpu/n*1000, "cpu-s/1000req")
			b.ReportMetric(float64(after.vcsw-before.vcsw)/n, "wakeups/req")
			b.ReportMetric(n/took.Seconds(), "req/s")
			if r := refused.Load(); r > 0 {
				b.Errorf("%d of %d requests not answered 200", r, b.N)
			}
			for _, c := range cs {
				c.CloseIdleConnections()
			}
		})
	}
}

func benchGet(b *testing.B, c *http.Client, u string) int {
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	req.Header.Set("X-Tenant", "a")
	resp, err := c.Do(req)
	if err != nil {
		b.Error(err)
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// rusage is the process's CPU time and voluntary context switches so far, all threads.
type rusage struct {
	cpu  time.Duration
	vcsw int64
}

func usage(b *testing.B) rusage {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return rusage{cpu: time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), vcsw: ru.Nvcsw}
}
