package controller

import (
	"fmt"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/store/memory"
)

// The work queue backs failures off from RetryBase doubling to RetryMax, on the controller's clock:
// a retried fleet comes back only once the clock has moved by its delay.
func TestQueueBacksOffOnTheClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(0, 0))
	p, _ := fake.New(fake.Options{})
	c, err := New(Options{Store: memory.New(), Providers: map[string]provider.Provider{fake.Name: p}, Clock: clk,
		RetryBase: 10 * time.Millisecond, RetryMax: 80 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.queue.ShutDown()
	var delays []time.Duration
	for range 5 {
		delays = append(delays, c.limiter.When("x"))
	}
	if want := []time.Duration{10, 20, 40, 80, 80}; !slices.Equal(delays, scaled(want, time.Millisecond)) {
		t.Fatalf("backoff delays %v, want %v ms", delays, want)
	}
	c.queue.AddAfter("x", delays[2])
	waitFor(t, 5*time.Second, func() string {
		if !clk.HasWaiters() {
			return "the queue is not waiting on the clock"
		}
		return ""
	})
	clk.Step(delays[2] - time.Millisecond)
	if n := c.queue.Len(); n != 0 {
		t.Fatalf("%d keys ready 1ms before their delay", n)
	}
	clk.Step(time.Millisecond)
	waitFor(t, 5*time.Second, func() string {
		if n := c.queue.Len(); n != 1 {
			return fmt.Sprintf("%d keys ready once the delay passed, want 1", n)
		}
		return ""
	})
}

func scaled(v []time.Duration, unit time.Duration) []time.Duration {
	out := make([]time.Duration, len(v))
	for i := range v {
		out[i] = v[i] * unit
	}
	return out
}
