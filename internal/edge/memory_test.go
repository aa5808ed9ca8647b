package edge

import (
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// The memory tier's bound holds: what it weighs its objects at covers what they cost on the heap,
// once stored and hit (the head hits write is made then), for bodies with and without a length,
// few fields and many; and it is not so far above that the bound would leave much of its room
// unused.
func TestWeightCoversMemory(t *testing.T) {
	const objects = 2000
	filler := strings.Repeat("abcdefghijklmnopqrstuvwxyz", 800)
	cases := []struct {
		name     string
		min, max int  // body sizes
		fields   int  // fields beyond the usual ones
		chunked  bool // no Content-Length: the body is read without knowing its length
	}{
		{name: "bench objects", min: 2048, max: 14336},
		{name: "small bodies, many fields", min: 200, max: 1200, fields: 12},
		{name: "chunked", min: 3000, max: 9000, chunked: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			size := func(n int) int { return c.min + n*7919%(c.max-c.min+1) }
			g := newRig(t, func(w http.ResponseWriter, r *http.Request) {
				n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/obj/"))
				h := w.Header()
				h.Set("Cache-Control", "public, max-age=3600")
				h.Set("Content-Type", "application/octet-stream")
				h.Set("ETag", fmt.Sprintf(`"%d-%d"`, n, size(n)))
				for i := range c.fields {
					h.Set(fmt.Sprintf("X-Field-%d", i), filler[i:i+20+n%30])
				}
				if !c.chunked {
					h.Set("Content-Length", strconv.Itoa(size(n)))
				}
				w.Write([]byte(filler[:size(n)]))
			}, nil)
			g.do("GET", "/warm")
			before := liveHeap()
			for n := range objects {
				path := "/obj/" + strconv.Itoa(n)
				g.expect(g.do("GET", path), 200, filler[:size(n)], "Miss", int64(n+2))
				g.expect(g.do("GET", path), 200, filler[:size(n)], "Hit", int64(n+2))
			}
			held := liveHeap()
			weight := float64(g.edge.store.c.WeightedSize())
			g.edge.Invalidate([]string{"/obj/*"})
			// The growth from before, and what dropping the objects gives back: garbage of an
			// earlier test freed meanwhile can only make either smaller than the objects' cost.
			cost := float64(max(held-before, held-liveHeap()))
			t.Logf("per object: heap %.0f bytes, weight %.0f", cost/objects, weight/(objects+1))
			if weight < cost {
				t.Errorf("the memory tier weighs its objects at %.0f bytes; they cost %.0f on the heap", weight, cost)
			}
			if weight > 1.1*cost {
				t.Errorf("the memory tier weighs its objects at %.0f bytes, more than 1.1 times their %.0f on the heap", weight, cost)
			}
		})
	}
}

// liveHeap is the heap's live bytes after a collection.
func liveHeap() int64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
