// Command burst sends -n GET requests for one URL at once, each on its own connection, and prints
// "ok=<int> failed=<int>": the coalescing round of herd's edge benchmark (make bench-edge), which then
// asks the origin how many of them reached it.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "http://127.0.0.1:18290/slow/burst", "URL to request")
	n := flag.Int("n", 1000, "concurrent requests")
	flag.Parse()
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConnsPerHost: *n, DisableCompression: true}}
	// Every request waits at the gate, so that they all reach the proxy before the first is answered.
	gate := make(chan struct{})
	var ok, failed atomic.Int64
	var wg sync.WaitGroup
	for range *n {
		wg.Go(func() {
			<-gate
			resp, err := client.Get(*url)
			if err != nil {
				failed.Add(1)
				return
			}
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != http.StatusOK {
				failed.Add(1)
				return
			}
			ok.Add(1)
		})
	}
	close(gate)
	wg.Wait()
	fmt.Printf("ok=%d failed=%d\n", ok.Load(), failed.Load())
	if failed.Load() > 0 {
		os.Exit(1)
	}
}
