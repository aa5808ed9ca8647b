package lb

import (
	"context"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// tenantResp is one answer to a tenant's request.
type tenantResp struct {
	code             int
	from, retryAfter string
	body             string
}

// tenantDo does a GET of path for tenant (by header) and returns its answer.
func tenantDo(t testing.TB, c *http.Client, lb *LB, path, tenant string) tenantResp {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url(lb, path), nil)
	req.Header.Set("X-Tenant", tenant)
	resp, err := c.Do(req)
	if err != nil {
		t.Errorf("GET %s for %s: %v", path, tenant, err)
		return tenantResp{}
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return tenantResp{resp.StatusCode, resp.Header.Get("X-Backend"), resp.Header.Get("Retry-After"), string(body)}
}

// A tenant at its bound of requests in flight gets 429 with Retry-After past the wait, or waits
// for a place when the wait allows, while another tenant's requests go on as before; the bound
// outlives an Apply that keeps its size.
func TestTenantBoundQueuesThenRefuses(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		release := make(chan struct{})
		var slow atomic.Int64
		a := newBackend(t, "a0", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/slow" {
				slow.Add(1)
				<-release
			}
			io.WriteString(w, "a0")
		})
		b := newBackend(t, "b0", nil)
		l := httpListener(TargetGroup{Name: "v1", Targets: append(tenantTargets("a", a), tenantTargets("b", b)...)})
		l.Tenancy = &Tenancy{Key: TenantByHeader, Header: "X-Tenant", Tenants: []string{"a", "b"}, MaxInFlight: 2}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 2)
		c := newClient()

		slowDone := make(chan tenantResp, 2)
		for range 2 {
			go func() { slowDone <- tenantDo(t, c, lb, "/slow", "a") }()
		}
		waitFor(t, 5*time.Second, "a's two slow requests at its target", func() bool { return slow.Load() == 2 })

		// a is at its bound and may not wait: 429 at once, saying why and when to come back.
		r := tenantDo(t, c, lb, "/", "a")
		if r.code != http.StatusTooManyRequests || r.retryAfter != "1" || !strings.Contains(r.body, "spec.tenancy.maxInFlight") || r.from != "" {
			t.Fatalf("a over its bound: %d Retry-After %q from %q, %q; want 429, Retry-After 1, naming the field, no target", r.code, r.retryAfter, r.from, r.body)
		}
		// b is not held to a's bound.
		for range 5 {
			if r := tenantDo(t, c, lb, "/", "b"); r.code != http.StatusOK || r.from != "b0" {
				t.Fatalf("b while a is at its bound: %d from %q", r.code, r.from)
			}
		}

		// With a wait allowed, a's next request waits for one of a's to end, then goes on.
		l.Tenancy.MaxWait = Duration(30 * time.Second)
		if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
			t.Fatal(err)
		}
		waited := make(chan tenantResp, 1)
		go func() { waited <- tenantDo(t, c, lb, "/", "a") }()
		waitFor(t, 5*time.Second, "a's request queued", func() bool { return stat(lb, "a").Queued == 2 })
		select {
		case r := <-waited:
			t.Fatalf("a's queued request answered %d while both places are taken", r.code)
		default:
		}
		close(release)
		if r := <-waited; r.code != http.StatusOK || r.from != "a0" {
			t.Fatalf("a's queued request: %d from %q, want 200 from a0", r.code, r.from)
		}
		for range 2 {
			if r := <-slowDone; r.code != http.StatusOK {
				t.Fatalf("a's slow request: %d", r.code)
			}
		}
		if s := stat(lb, "a"); s.Limited != 1 || s.Queued != 2 {
			t.Fatalf("a's stats: %+v, want 1 limited of 2 queued", s)
		}
		if s := stat(lb, "b"); s.Limited != 0 || s.Queued != 0 || s.Requests != 5 {
			t.Fatalf("b's stats: %+v, want 5 requests, none queued", s)
		}
	})
}

// A tenant over its rate gets 429 with Retry-After when its turn would come after the wait, or
// waits for its turn when the wait allows; another tenant is not held to it.
func TestTenantRateQueuesThenRefuses(t *testing.T) {
	forEachEngine(t, func(t *testing.T, e Engine) {
		a := newBackend(t, "a0", nil)
		b := newBackend(t, "b0", nil)
		l := httpListener(TargetGroup{Name: "v1", Targets: append(tenantTargets("a", a), tenantTargets("b", b)...)})
		// One request per 100 s: a's second comes long before its turn.
		l.Tenancy = &Tenancy{Key: TenantByHeader, Header: "X-Tenant", Tenants: []string{"a", "b"}, RequestsPerSecond: 0.01, MaxWait: Duration(30 * time.Second)}
		lb := startLB(t, e, Config{Listeners: []Listener{l}})
		waitHealthy(t, lb, 2)
		c := newClient()
		if r := tenantDo(t, c, lb, "/", "a"); r.code != http.StatusOK || r.from != "a0" {
			t.Fatalf("a's first request: %d from %q", r.code, r.from)
		}
		r := tenantDo(t, c, lb, "/", "a")
		if r.code != http.StatusTooManyRequests || r.retryAfter != "1" || !strings.Contains(r.body, "spec.tenancy.requestsPerSecond") {
			t.Fatalf("a over its rate: %d Retry-After %q, %q; want 429, Retry-After 1, naming the field", r.code, r.retryAfter, r.body)
		}
		// b has a bucket of its own, untouched by a's.
		if r := tenantDo(t, c, lb, "/", "b"); r.code != http.StatusOK || r.from != "b0" {
			t.Fatalf("b while a is over its rate: %d from %q", r.code, r.from)
		}
		// At two a second, a's third request in a row waits for its turn rather than being refused.
		l.Tenancy.RequestsPerSecond = 2
		if err := lb.Apply(Config{Listeners: []Listener{l}}); err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			if r := tenantDo(t, c, lb, "/", "a"); r.code != http.StatusOK {
				t.Fatalf("a's request %d at 2/s: %d %q", i, r.code, r.body)
			}
		}
		if s := stat(lb, "a"); s.Limited != 1 || s.Queued < 2 {
			t.Fatalf("a's stats: %+v, want 1 limited and at least 2 queued", s)
		}
		if s := stat(lb, "b"); s.Limited != 0 || s.Queued != 0 {
			t.Fatalf("b's stats: %+v, want none queued", s)
		}
	})
}

func TestTenantBoundConfig(t *testing.T) {
	l := httpListener()
	l.Tenancy = &Tenancy{Key: TenantByHeader, Header: "X-Tenant", MaxInFlight: -1, RequestsPerSecond: -1, MaxWait: Duration(-time.Second)}
	err := Config{Listeners: []Listener{l}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "tenancy.maxInFlight") || !strings.Contains(err.Error(), "tenancy.maxWait") || !strings.Contains(err.Error(), "tenancy.requestsPerSecond") {
		t.Fatalf("Validate: %v, want errors naming tenancy.maxInFlight and tenancy.maxWait", err)
	}
}

// stat returns the load balancer's figures of one tenant of fleet web.
func stat(lb *LB, tenant string) TenantStat {
	for _, s := range lb.TenantStats("web") {
		if s.Tenant == tenant {
			return s
		}
	}
	return TenantStat{}
}

// Requests held to a tenant's rate go in batches, one timer for all, but none before its turn
// in the bucket, and the queue ends empty.
func TestTenantPaceKeepsTurns(t *testing.T) {
	const rps, burst, n = 100, 10, 40
	var tl tenantLimit
	start := time.Now()
	done := make(chan time.Time, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			err := tl.waitTurn(context.Background(), rps, time.Minute)
			done <- time.Now()
			errs <- err
		}()
	}
	var at []time.Time
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		at = append(at, <-done)
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	// The k-th request to go needs k+1 tokens: the bucket's, and one per 1/rps since it was
	// made (a millisecond for the limiter's rounding).
	for k := burst; k < n; k++ {
		if turn := start.Add(time.Duration(k+1-burst) * time.Second / rps); at[k].Before(turn.Add(-time.Millisecond)) {
			t.Errorf("request %d went %s before its turn", k, turn.Sub(at[k]))
		}
	}
	b := tl.bucket.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) != 0 {
		t.Fatalf("%d left in the queue after every turn came", len(b.queue))
	}
}

// A request that stops waiting for its turn returns at once; its place is skipped.
func TestTenantPaceLeaving(t *testing.T) {
	var tl tenantLimit
	const rps = 0.01 // one token, the next in 100 s
	if err := tl.waitTurn(context.Background(), rps, time.Hour); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	left := make(chan error, 1)
	go func() { left <- tl.waitTurn(ctx, rps, time.Hour) }()
	waitFor(t, 5*time.Second, "the second request queued", func() bool { return tl.queued.Load() == 1 })
	cancel()
	select {
	case err := <-left:
		if err != context.Canceled {
			t.Fatalf("the request that stopped waiting: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request that stopped waiting did not return")
	}
	b := tl.bucket.Load()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.queue) != 1 || !b.queue[0].left || b.queue[0].released {
		t.Fatalf("the queue after the request left: %d places, want one, left and not released", len(b.queue))
	}
}
