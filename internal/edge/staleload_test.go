package edge

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// RFC 5861 section 4 under load: clients keep asking for 50 cached objects, coalesced as herd up
// runs them, while the origin is killed and then every object goes stale. Not one request fails:
// the edge answers each with its stale object.
func TestStaleIfErrorUnderLoadOriginKilled(t *testing.T) {
	g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=10, stale-if-error=600")
		io.WriteString(w, "object "+r.URL.Path)
	}, func(b *Behavior) { b.Coalesce = true })
	const objects, clients = 50, 16
	for i := range objects {
		g.do("GET", fmt.Sprintf("/o/%d", i))
	}
	var ok, stale, failed atomic.Int64
	var firstFailure atomic.Value
	fail := func(s string) {
		failed.Add(1)
		firstFailure.CompareAndSwap(nil, s)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := c; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				path := fmt.Sprintf("/o/%d", i%objects)
				resp, err := g.client.Get(g.srv.URL + path)
				if err != nil {
					fail(err.Error())
					continue
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || string(b) != "object "+path {
					fail(fmt.Sprintf("%s: %d %q %v", path, resp.StatusCode, b, err))
					continue
				}
				if resp.Header.Get("X-Cache") == "StaleHit" {
					stale.Add(1)
				}
				ok.Add(1)
			}
		})
	}
	waitFor(t, "load on the fresh objects", func() bool { return ok.Load() >= 500 })
	g.origin.CloseClientConnections()
	g.origin.Close() // killed under load
	base := ok.Load()
	waitFor(t, "load with the origin down", func() bool { return ok.Load() >= base+500 })
	g.advance(30 * time.Second) // every object is stale now, and the origin cannot be reached
	base = ok.Load()
	waitFor(t, "load on stale objects", func() bool { return stale.Load() >= 2000 })
	close(stop)
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d requests for cached objects failed with the origin down; the first: %v", n, n+ok.Load(), firstFailure.Load())
	}
	if ok.Load()-base < 2000 {
		t.Fatalf("%d requests answered after the objects went stale, want at least 2000", ok.Load()-base)
	}
}
