package edge

import (
	"context"
	"sync"
	"time"

	"github.com/maypok86/otter/v2"
)

// flight is one origin request that others for the same key wait for.
type flight struct {
	done chan struct{}
}

// coalescer makes concurrent misses for one key share one origin request. It does not carry the
// response: the leader stores it, and the waiters look the cache up again once it is done, so that a
// waiter is served by the same rules (Vary, freshness) as any later request.
type coalescer struct {
	mu       sync.Mutex
	inFlight map[string]*flight
	// hitForMiss marks keys whose last response could not be stored, for a while, so that requests
	// for them go to the origin side by side instead of waiting for each other in turn.
	hitForMiss *otter.Cache[string, time.Duration]
}

func newCoalescer() *coalescer {
	return &coalescer{
		inFlight: map[string]*flight{},
		hitForMiss: otter.Must(&otter.Options[string, time.Duration]{
			MaximumSize: 100_000,
			ExpiryCalculator: otter.ExpiryWritingFunc(func(e otter.Entry[string, time.Duration]) time.Duration {
				return e.Value
			}),
		}),
	}
}

// join returns the flight for key and whether the caller leads it. The leader must call land when
// its origin request is over, stored or not.
func (c *coalescer) join(key string) (f *flight, leader bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.inFlight[key]; ok {
		return f, false
	}
	f = &flight{done: make(chan struct{})}
	c.inFlight[key] = f
	return f, true
}

// land ends the leader's flight and wakes its waiters.
func (c *coalescer) land(key string, f *flight) {
	c.mu.Lock()
	if c.inFlight[key] == f {
		delete(c.inFlight, key)
	}
	c.mu.Unlock()
	close(f.done)
}

// wait blocks until the flight lands, at most d, and reports whether it did.
func (f *flight) wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-f.done:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

// markUncacheable makes requests for key skip coalescing for d.
func (c *coalescer) markUncacheable(key string, d time.Duration) {
	if d > 0 {
		c.hitForMiss.Set(key, d)
	}
}

// uncacheable reports whether key is marked hit-for-miss.
func (c *coalescer) uncacheable(key string) bool {
	_, ok := c.hitForMiss.GetIfPresent(key)
	return ok
}

// clear removes a hit-for-miss mark, when the key's response has become storable again.
func (c *coalescer) clear(key string) {
	c.hitForMiss.Invalidate(key)
}

// busy reports whether a flight for key is under way, so that a background revalidation does not
// start a second one.
func (c *coalescer) busy(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.inFlight[key]
	return ok
}
