package edge

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkObjectsHeld fills a 64 MiB memory tier with more objects than it holds, the objects of
// make bench-edge (2 to 14 KiB bodies with its origin's fields), each stored by a miss and served
// once by a hit, and reports what the tier holds: objects, and bytes per object beyond the body,
// by the tier's weight and by the heap.
func BenchmarkObjectsHeld(b *testing.B) {
	const maxBytes, objects = 64 << 20, 12000
	body := []byte(strings.Repeat("0123456789abcdef", 14336/16))
	size := func(n int) int { return 2048 + n*7919%(14336-2048+1) }
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/obj/"))
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("Content-Type", "application/octet-stream")
		h.Set("ETag", fmt.Sprintf(`"%d-%d"`, n, size(n)))
		h.Set("Content-Length", strconv.Itoa(size(n)))
		w.Write(body[:size(n)])
	}))
	defer origin.Close()
	u, _ := url.Parse(origin.URL)
	for b.Loop() {
		e, err := New(Config{MaxBytes: maxBytes, Behaviors: []Behavior{{PathPattern: "*", Origin: Origin{Primary: u},
			AllowedMethods: []string{"GET", "HEAD"}}}}, slog.New(slog.DiscardHandler))
		if err != nil {
			b.Fatal(err)
		}
		srv := startServer(b, e)
		client := &http.Client{}
		before := liveHeap()
		for n := range objects {
			for range 2 {
				resp, err := client.Get(srv.URL + "/obj/" + strconv.Itoa(n))
				if err != nil {
					b.Fatal(err)
				}
				resp.Body.Close()
			}
		}
		e.store.c.CleanUp()
		heap := liveHeap() - before
		held, bodies := 0, 0
		for pk := range e.store.c.Keys() {
			n, _ := strconv.Atoi(pk[strings.LastIndexByte(pk, '/')+1:])
			held++
			bodies += size(n)
		}
		weight := int(e.store.c.WeightedSize())
		b.ReportMetric(float64(held), "objects")
		b.ReportMetric(float64(weight-bodies)/float64(held), "weight-B/object")
		b.ReportMetric(float64(int(heap)-bodies)/float64(held), "heap-B/object")
		client.CloseIdleConnections()
		srv.Close()
	}
}
