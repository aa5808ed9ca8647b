package lb

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// A tenant over its rate (Tenancy.RequestsPerSecond) waits for its turn in its token bucket.
// Such requests are paced: at 1,000 a second a turn comes every millisecond, and with a timer per
// request the process woke its sleeping threads for every one of them (BenchmarkTenantPacing: 3.4
// thread wake-ups and 0.15 CPU seconds per 1,000 held requests, against 0.1 and 0.04 for the same
// requests unbounded, back to back). So a bucket keeps its waiting requests in a queue, in the
// order of their turns, and one timer per bucket releases, each time it fires, every request
// whose turn has come: the load balancer wakes once per paceTick for all of them (1 wake-up and
// 0.08 CPU seconds per 1,000). A request never goes before its turn, so the rate is the
// bucket's to the request; a held request waits up to paceTick past its turn.

// paceTick is the most a held request waits past its turn, so that one wake-up releases the
// requests of a tenant whose turns came within it.
const paceTick = 10 * time.Millisecond

// tenantBucket is a token bucket of one rate and the queue of the requests that wait for their
// turns in it: a change of Tenancy.RequestsPerSecond starts a new one, and the old one's queue
// is still released by its own timer.
type tenantBucket struct {
	rps float64
	lim *rate.Limiter

	mu    sync.Mutex
	queue []*turn     // by time of turn; not empty from the timer's arming until it fires
	timer *time.Timer // releases the queue's head, and every turn come with it
}

// turn is one waiting request's place in its bucket's queue.
type turn struct {
	at       time.Time
	res      *rate.Reservation
	ready    chan struct{} // closed when the turn has come
	released bool          // under the bucket's mu
	left     bool          // the request stopped waiting; its place is skipped
}

// bucketOf returns the tenant's bucket of rate rps, holding a tenth of a second's requests.
func (tl *tenantLimit) bucketOf(rps float64) *tenantBucket {
	return current(&tl.bucket, func(b *tenantBucket) bool { return b.rps == rps },
		func() *tenantBucket {
			return &tenantBucket{rps: rps, lim: rate.NewLimiter(rate.Limit(rps), max(1, int(rps/10)))}
		})
}

// waitTurn waits for the request's turn in the tenant's rate, if it has one; it returns an
// error when the turn comes after maxWait (nothing is taken then) or the context ends first.
func (tl *tenantLimit) waitTurn(ctx context.Context, rps float64, maxWait time.Duration) error {
	if rps <= 0 {
		return nil
	}
	b := tl.bucketOf(rps)
	now := time.Now()
	b.mu.Lock()
	// Reserved under the queue's lock, so that the queue is in the order of the turns.
	r := b.lim.ReserveN(now, 1)
	d := r.DelayFrom(now)
	if r.OK() && d == 0 {
		b.mu.Unlock()
		return nil
	}
	tl.queued.Add(1)
	if !r.OK() || d > maxWait {
		r.CancelAt(now)
		b.mu.Unlock()
		return context.DeadlineExceeded
	}
	t := &turn{at: now.Add(d), res: r, ready: make(chan struct{})}
	b.queue = append(b.queue, t)
	if len(b.queue) == 1 {
		b.arm(now)
	}
	b.mu.Unlock()
	select {
	case <-t.ready:
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		if !t.released {
			t.left = true
			t.res.Cancel()
		}
		b.mu.Unlock()
		return ctx.Err()
	}
}

// arm sets the timer for the queue's head, rounded up to paceTick so that the turns that come
// meanwhile go with it. Called with mu held and the queue not empty.
func (b *tenantBucket) arm(now time.Time) {
	d := b.queue[0].at.Sub(now)
	d = (d + paceTick - 1) / paceTick * paceTick
	if b.timer == nil {
		b.timer = time.AfterFunc(d, b.release)
		return
	}
	b.timer.Reset(d)
}

// release lets every request whose turn has come go on, in order, and sets the timer for the
// next.
func (b *tenantBucket) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := time.Now()
	n := 0
	for n < len(b.queue) && !b.queue[n].at.After(now) {
		if t := b.queue[n]; !t.left {
			t.released = true
			close(t.ready)
		}
		n++
	}
	b.queue = slices.Delete(b.queue, 0, n)
	if len(b.queue) > 0 {
		b.arm(now)
	}
}
