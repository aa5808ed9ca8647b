package lb

import (
	"sync"
	"sync/atomic"
	"time"
)

// retryBudget lets a listener retry at most ratio retries per request plus minPerSecond retries per
// second, so that when targets fail, retries add a bounded share of load instead of doubling it.
// It is a token bucket counted in thousandths of a retry: every request deposits ratio, time deposits
// minPerSecond, every retry withdraws one.
type retryBudget struct {
	milli      atomic.Int64 // tokens, in thousandths of a retry
	perRequest atomic.Int64
	capacity   atomic.Int64

	mu           sync.Mutex // guards the fields below; taken only when retrying
	perSecond    int64
	lastRefilled time.Time
}

func newRetryBudget() *retryBudget {
	return &retryBudget{lastRefilled: time.Now()}
}

func (b *retryBudget) configure(r Retry) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.perRequest.Store(int64(r.Budget * 1000))
	b.perSecond = int64(r.MinPerSecond) * 1000
	// A burst of at most ten seconds of the floor, or 100 retries, can be saved up.
	b.capacity.Store(max(10*b.perSecond, 100*1000))
	if b.milli.Load() == 0 {
		b.milli.Store(b.perSecond)
	}
}

// deposit is called for every request; it is one atomic add on the hot path.
func (b *retryBudget) deposit() {
	if b.milli.Load() < b.capacity.Load() {
		b.milli.Add(b.perRequest.Load())
	}
}

// take withdraws one retry, or reports false when the budget is spent.
func (b *retryBudget) take() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	if elapsed := now.Sub(b.lastRefilled); elapsed > 0 {
		refill := int64(elapsed.Seconds() * float64(b.perSecond))
		if refill > 0 {
			b.milli.Store(min(b.milli.Load()+refill, b.capacity.Load()))
			b.lastRefilled = now
		}
	}
	if b.milli.Load() < 1000 {
		return false
	}
	b.milli.Add(-1000)
	return true
}
