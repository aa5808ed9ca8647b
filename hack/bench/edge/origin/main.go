// Command origin is the origin of herd's edge benchmark (make bench-edge). It serves a fixed set of
// objects, /obj/0 to /obj/N-1, each cacheable for an hour with an ETag and a body whose size (from
// -min to -max bytes) follows from its number, so that every proxy in front of it sees the same
// objects; and /slow/NAME, a cacheable object answered after -slow, which the coalescing burst asks
// for while it is not cached yet.
//
// It listens on one port per proxy and counts what each port received, so that each proxy's origin
// requests are told apart: GET /_count on a port answers "objects=<int> slow=<int>" for that port.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	addrs := flag.String("addrs", "127.0.0.1:18300", "comma-separated addresses to listen on, one per proxy")
	minSize := flag.Int("min", 2048, "smallest body, in bytes")
	maxSize := flag.Int("max", 14336, "largest body, in bytes")
	objects := flag.Int("objects", 20000, "number of objects")
	slow := flag.Duration("slow", 500*time.Millisecond, "how long /slow/NAME takes")
	flag.Parse()
	if *minSize <= 0 || *maxSize < *minSize || *objects <= 0 {
		log.Fatal("origin: need 0 < -min <= -max and -objects > 0")
	}
	body := make([]byte, *maxSize)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	o := &origin{body: body, min: *minSize, objects: *objects, slow: *slow}
	for _, addr := range strings.Split(*addrs, ",") {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		srv := &http.Server{Handler: o.port(), ReadHeaderTimeout: 10 * time.Second}
		go func() { log.Fatal(srv.Serve(ln)) }()
	}
	select {}
}

type origin struct {
	body    []byte
	min     int
	objects int
	slow    time.Duration
}

// size is object n's body size: spread over [min, max] by a multiplicative hash of n, so that
// popularity (n's rank) and size are unrelated.
func (o *origin) size(n int) int {
	span := uint64(len(o.body) - o.min + 1)
	return o.min + int(uint64(n)*2654435761%span)
}

// port is the handler of one listening port, with its own counts.
func (o *origin) port() http.Handler {
	var objects, slow atomic.Int64
	mux := http.NewServeMux()
	mux.HandleFunc("GET /_count", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "objects=%d slow=%d\n", objects.Load(), slow.Load())
	})
	mux.HandleFunc("GET /obj/{n}", func(w http.ResponseWriter, r *http.Request) {
		objects.Add(1)
		n, err := strconv.Atoi(r.PathValue("n"))
		if err != nil || n < 0 || n >= o.objects {
			http.NotFound(w, r)
			return
		}
		size := o.size(n)
		o.write(w, fmt.Sprintf(`"%d-%d"`, n, size), o.body[:size])
	})
	mux.HandleFunc("GET /slow/{name}", func(w http.ResponseWriter, r *http.Request) {
		slow.Add(1)
		time.Sleep(o.slow)
		o.write(w, `"slow-`+r.PathValue("name")+`"`, o.body[:o.min])
	})
	return mux
}

func (o *origin) write(w http.ResponseWriter, etag string, body []byte) {
	h := w.Header()
	h.Set("Cache-Control", "public, max-age=3600")
	h.Set("Content-Type", "application/octet-stream")
	h.Set("ETag", etag)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.Write(body)
}
