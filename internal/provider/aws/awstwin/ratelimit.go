package awstwin

import "golang.org/x/time/rate"

// RateLimit throttles as EC2 does: each region answers calls beyond a token bucket of r calls a
// second, bursts of burst, with RequestLimitExceeded (the bucket the account's callers share).
// r = rate.Inf lifts it.
func (tw *Twin) RateLimit(r rate.Limit, burst int) {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	tw.limit, tw.burst = r, burst
	tw.buckets = map[string]*rate.Limiter{}
}

// overLimit takes a token of region's bucket and reports whether there was none; the caller
// holds tw.mu.
func (tw *Twin) overLimit(region string) bool {
	if tw.limit == 0 || tw.limit == rate.Inf {
		return false
	}
	b, ok := tw.buckets[region]
	if !ok {
		b = rate.NewLimiter(tw.limit, tw.burst)
		tw.buckets[region] = b
	}
	return !b.AllowN(tw.opts.Now(), 1)
}
