package edge

import (
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// 1,000 concurrent requests for one uncached object make exactly one origin request: the origin
// answers only once the other 999 are waiting for it, and every client gets the body.
func TestCoalescingThousandMissesOneOriginRequest(t *testing.T) {
	const n = 1000
	var g *rig
	g = newRig(t, func(w http.ResponseWriter, r *http.Request) {
		waitFor(t, "999 coalesced waiters", func() bool {
			return testutil.ToFloat64(g.edge.metrics.coalesced) >= n-1
		})
		w.Header().Set("Cache-Control", "max-age=60")
		w.Write([]byte("shared"))
	}, func(b *Behavior) { b.Coalesce = true })
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := g.client.Get(g.srv.URL + "/obj")
			if err != nil {
				errs <- err.Error()
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != 200 || string(b) != "shared" {
				errs <- resp.Status + " " + string(b)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatalf("a client got %s", e)
	}
	if got := g.hits.Load(); got != 1 {
		t.Fatalf("origin received %d requests, want 1", got)
	}
	if got := testutil.ToFloat64(g.edge.metrics.originRequests); got != 1 {
		t.Fatalf("origin_requests_total = %v, want 1", got)
	}
}

// Once a key's response turns out not storable, its concurrent requests go to the origin side by
// side: the origin answers none until all of them are in flight at once, which it could never see
// if they queued behind each other.
func TestHitForMissNotSerialised(t *testing.T) {
	const n = 20
	var inFlight atomic.Int64
	var first atomic.Bool
	first.Store(true)
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		if first.CompareAndSwap(true, false) {
			w.Write([]byte("first"))
			return
		}
		inFlight.Add(1)
		deadline := time.Now().Add(10 * time.Second)
		for inFlight.Load() < n {
			if time.Now().After(deadline) {
				http.Error(w, "requests were serialised", http.StatusInternalServerError)
				return
			}
			time.Sleep(time.Millisecond)
		}
		w.Write([]byte("ok"))
	}, func(b *Behavior) { b.Coalesce = true; b.HitForMiss = time.Minute })
	g.expect(g.do("GET", "/dyn"), 200, "first", "Miss", 1)
	var wg sync.WaitGroup
	replies := make(chan reply, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			replies <- g.do("GET", "/dyn")
		}()
	}
	wg.Wait()
	close(replies)
	for r := range replies {
		if r.status != 200 || r.body != "ok" {
			t.Fatalf("a client got %d %q", r.status, r.body)
		}
	}
}

// Without coalescing, concurrent misses each go to the origin.
func TestCoalescingOff(t *testing.T) {
	const n = 5
	var inFlight atomic.Int64
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		inFlight.Add(1)
		waitFor(t, "all requests at the origin", func() bool { return inFlight.Load() >= n })
		w.Header().Set("Cache-Control", "max-age=60")
		w.Write([]byte("x"))
	}, nil)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); g.do("GET", "/a") }()
	}
	wg.Wait()
	if g.hits.Load() != n {
		t.Fatalf("origin received %d requests, want %d", g.hits.Load(), n)
	}
}
