package lb

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"
)

// A tenant's bounds, on requests in flight (Tenancy.MaxInFlight) and on its rate
// (Tenancy.RequestsPerSecond), are what keep one tenant's flood from taking the load balancer,
// and the machine under it, from the others: past a bound, its requests wait on its own
// semaphore or token bucket (a goroutine asleep, no work) instead of joining every tenant's
// requests on the load balancer's CPUs and the tenant's instances. The semaphore serves its
// waiters in arrival order, and the bucket its queue (tenantpace.go), so within a tenant nobody
// is starved either; a request whose turn would come after Tenancy.MaxWait is answered 429 with
// Retry-After, as a rate-limited API answers.

// retryAfterLimited is the Retry-After, in seconds, of a request over its tenant's bound.
const retryAfterLimited = 1

// tenantLimit is one tenant's bound, kept across Applies in its tenantStats.
type tenantLimit struct {
	gate    atomic.Pointer[tenantGate]
	bucket  atomic.Pointer[tenantBucket]
	queued  atomic.Uint64
	limited atomic.Uint64
}

// tenantGate is a semaphore of one size: a change of Tenancy.MaxInFlight starts a new one, and
// the requests in flight on the old one release it.
type tenantGate struct {
	size int64
	sem  *semaphore.Weighted
}

// gateOf returns the tenant's gate of size n.
func (tl *tenantLimit) gateOf(n int64) *tenantGate {
	return current(&tl.gate, func(g *tenantGate) bool { return g.size == n },
		func() *tenantGate { return &tenantGate{size: n, sem: semaphore.NewWeighted(n)} })
}

// current returns p's value when it fits, or else a new one that it stores in p.
func current[T any](p *atomic.Pointer[T], fits func(*T) bool, fresh func() *T) *T {
	for {
		v := p.Load()
		if v != nil && fits(v) {
			return v
		}
		nv := fresh()
		if p.CompareAndSwap(v, nv) {
			return nv
		}
	}
}

func noRelease() {}

// enterTenant waits for the request's turn in its tenant's rate and takes a place in its bound
// of requests in flight, each waiting up to Tenancy.MaxWait, and returns what frees the place;
// when the turn or the place did not come, or the client left while waiting, it answers (429) or
// records the request and reports false.
func (l *listener) enterTenant(ctx context.Context, st *listenerState, x exchange, s *tenantStats, tenant string, start time.Time) (release func(), ok bool) {
	tc := st.cfg.Tenancy
	if tc.MaxInFlight <= 0 && tc.RequestsPerSecond <= 0 {
		return noRelease, true
	}
	release = noRelease
	err := s.limit.waitTurn(ctx, tc.RequestsPerSecond, tc.MaxWait.D())
	if err == nil && tc.MaxInFlight > 0 {
		g := s.limit.gateOf(int64(tc.MaxInFlight))
		if !g.sem.TryAcquire(1) {
			s.limit.queued.Add(1)
			err = context.DeadlineExceeded
			if tc.MaxWait > 0 {
				wctx, cancel := context.WithTimeout(ctx, tc.MaxWait.D())
				err = g.sem.Acquire(wctx, 1)
				cancel()
			}
		}
		if err == nil {
			release = func() { g.sem.Release(1) }
		}
	}
	if err == nil {
		return release, true
	}
	if ctx.Err() != nil {
		l.stats.observe(ClassFailed, time.Since(start))
		return nil, false
	}
	s.limit.limited.Add(1)
	x.refuse(http.StatusTooManyRequests, retryAfterLimited, fmt.Sprintf(
		"tenant %q is over a bound of fleet %s (spec.tenancy.maxInFlight: %d requests in flight, spec.tenancy.requestsPerSecond: %g; 0 is none) and its turn did not come within %s (spec.tenancy.maxWait): retry later, or raise the bound\n",
		tenant, st.cfg.Fleet, tc.MaxInFlight, tc.RequestsPerSecond, tc.MaxWait))
	l.stats.observe(Class4xx, time.Since(start))
	return nil, false
}
