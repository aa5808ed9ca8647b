// Command loadgen sends HTTP/1.1 GET requests at a fixed rate over keep-alive connections and prints
// latency percentiles. Latency is measured from when each request was due, not from when it was sent,
// so a stalled server is charged for every request it delayed (no coordinated omission), as wrk2 does.
//
// Requests are due at start + i/rate; connection k sends requests k, k+conns, k+2*conns, ... one at a
// time, so a request whose connection is still busy waits, and its wait counts in its latency. Output is
// one line of key=value pairs; sent counts every request sent, warm-up included. late counts the
// measured requests sent more than 1 ms after they were due; behind counts those sent more than
// 2 ms late whose connection was free before the request was due, so that only the generator (or
// the core it runs on) can have been late: a round with requests behind did not keep its schedule,
// and its latencies are the generator's as much as the server's. (Go's network poller sleeps in
// whole milliseconds, so a request due within the next millisecond may be sent up to 1 ms late
// with nothing behind: that much is the generator's resolution, charged to every server alike.)
//
// With -objects N, request paths are -path followed by an object number from 0 to N-1 drawn from a
// Zipf distribution of exponent -zipf (math/rand/v2's, rank 0 the most popular): the workload of an
// edge cache. Each connection draws from its own generator, seeded by its number and -seed, so that
// every run with the same -seed sends the same requests.
//
// With -tls-ca FILE, connections speak TLS (HTTP/1.1 by ALPN), trusting the certificates in FILE: each
// connection makes one handshake and then carries its requests, so that the figures are those of
// requests over TLS, not of handshakes.
package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:18090", "host:port to load")
	path := flag.String("path", "/", "request path")
	rate := flag.Float64("rate", 1000, "requests per second")
	duration := flag.Duration("duration", 10*time.Second, "measured time")
	warmup := flag.Duration("warmup", 2*time.Second, "time at the same rate before measuring")
	conns := flag.Int("conns", 64, "keep-alive connections")
	objects := flag.Uint64("objects", 0, "with N > 0, request -path followed by 0 to N-1, Zipf-distributed")
	zipf := flag.Float64("zipf", 1.01, "the Zipf exponent of -objects (> 1)")
	seed := flag.Uint64("seed", 1, "with -objects, the sequence: runs with the same seed send the same requests")
	tlsCA := flag.String("tls-ca", "", "with a PEM file of CA certificates, speak TLS to -addr, trusting them")
	flag.Parse()
	if *objects > 0 && *zipf <= 1 {
		fmt.Fprintln(os.Stderr, "loadgen: -zipf must be greater than 1")
		os.Exit(2)
	}
	dial, err := dialer(*addr, *tlsCA)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen: -tls-ca:", err)
		os.Exit(2)
	}
	if err := run(*addr, dial, paths{prefix: *path, objects: *objects, s: *zipf, seed: *seed}, *rate, *duration, *warmup, *conns); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// dialer returns how connections to addr are made: TCP, or TLS trusting the certificates in caFile.
func dialer(addr, caFile string) (func() (net.Conn, error), error) {
	if caFile == "" {
		return func() (net.Conn, error) { return net.Dial("tcp", addr) }, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no PEM certificate in %s", caFile)
	}
	cfg := &tls.Config{RootCAs: pool, NextProtos: []string{"http/1.1"}}
	return func() (net.Conn, error) { return tls.Dial("tcp", addr, cfg) }, nil
}

// paths are the request paths: the prefix alone, or followed by Zipf-distributed object numbers.
type paths struct {
	prefix  string
	objects uint64
	s       float64
	seed    uint64
}

// requests returns a function that makes the next request of connection k.
func (p paths) requests(addr string, k int) func() []byte {
	head := func(path string) []byte {
		return []byte("GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUser-Agent: herd-loadgen\r\n\r\n")
	}
	if p.objects == 0 {
		req := head(p.prefix)
		return func() []byte { return req }
	}
	z := rand.NewZipf(rand.New(rand.NewPCG(uint64(k), p.seed)), p.s, 1, p.objects-1)
	return func() []byte { return head(p.prefix + strconv.FormatUint(z.Uint64(), 10)) }
}

// behindAfter is how late a request on a free connection is sent before the generator counts
// itself behind: the poller's millisecond of resolution, and as much again.
const behindAfter = 2 * time.Millisecond

type result struct {
	latencies []time.Duration // of measured requests
	sent      int             // every request sent, warm-up included
	errors    int
	late      int // measured requests sent more than 1 ms after they were due: the server is behind, or the generator is
	behind    int // requests sent more than behindAfter late on a connection free before they were due: the generator is behind
}

func run(addr string, dial func() (net.Conn, error), p paths, rate float64, duration, warmup time.Duration, conns int) error {
	if rate <= 0 || conns <= 0 {
		return errors.New("rate and conns must be positive")
	}
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now().Add(100 * time.Millisecond)
	measureFrom := start.Add(warmup)
	end := measureFrom.Add(duration)

	results := make([]result, conns)
	var wg sync.WaitGroup
	for k := range conns {
		wg.Go(func() {
			results[k] = worker(dial, p.requests(addr, k), start, measureFrom, end, interval, k, conns)
		})
	}
	wg.Wait()

	var all []time.Duration
	errs, late, behind, sent := 0, 0, 0, 0
	for _, r := range results {
		all = append(all, r.latencies...)
		sent += r.sent
		errs += r.errors
		late += r.late
		behind += r.behind
	}
	if len(all) == 0 {
		return fmt.Errorf("no request succeeded (%d errors)", errs)
	}
	slices.Sort(all)
	pct := func(p float64) int64 {
		i := min(len(all)-1, int(p*float64(len(all))))
		return all[i].Microseconds()
	}
	fmt.Printf("rate=%.0f achieved=%.0f sent=%d ok=%d errors=%d late=%d behind=%d p50_us=%d p90_us=%d p99_us=%d p999_us=%d max_us=%d\n",
		rate, float64(len(all))/duration.Seconds(), sent, len(all), errs, late, behind,
		pct(0.50), pct(0.90), pct(0.99), pct(0.999), all[len(all)-1].Microseconds())
	return nil
}

func worker(dial func() (net.Conn, error), next func() []byte, start, measureFrom, end time.Time, interval time.Duration, k, conns int) result {
	var res result
	var c net.Conn
	var br *bufio.Reader
	for i := k; ; i += conns {
		at := start.Add(time.Duration(i) * interval)
		if !at.Before(end) {
			break
		}
		wait := time.Until(at)
		if wait > 0 {
			time.Sleep(wait)
		}
		measured := !at.Before(measureFrom)
		if lag := time.Since(at); measured && lag > time.Millisecond {
			res.late++
			if wait > 0 && lag > behindAfter {
				res.behind++
			}
		}
		if c == nil {
			var err error
			c, err = dial()
			if err != nil {
				if measured {
					res.errors++
				}
				continue
			}
			br = bufio.NewReaderSize(c, 16<<10)
		}
		res.sent++
		keep, err := roundTrip(c, br, next())
		if err != nil {
			c.Close()
			c = nil
			if measured {
				res.errors++
			}
			continue
		}
		if measured {
			res.latencies = append(res.latencies, time.Since(at))
		}
		if !keep {
			c.Close()
			c = nil
		}
	}
	if c != nil {
		c.Close()
	}
	return res
}

// roundTrip writes req and reads one response; it reports whether the connection may be reused.
func roundTrip(c net.Conn, br *bufio.Reader, req []byte) (keep bool, err error) {
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		return false, err
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return false, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[9] != '2' {
		return false, fmt.Errorf("bad status line %q", line)
	}
	length, chunked, keep := -1, false, true
	for {
		h, err := br.ReadSlice('\n')
		if err != nil {
			return false, err
		}
		if len(h) <= 2 {
			break
		}
		name, value, _ := bytes.Cut(bytes.TrimRight(h, "\r\n"), []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			length, err = strconv.Atoi(string(value))
			if err != nil {
				return false, err
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			keep = !bytes.EqualFold(value, []byte("close"))
		}
	}
	switch {
	case chunked:
		for {
			sizeLine, err := br.ReadSlice('\n')
			if err != nil {
				return false, err
			}
			size, err := strconv.ParseInt(string(bytes.TrimSpace(bytes.SplitN(sizeLine, []byte(";"), 2)[0])), 16, 64)
			if err != nil {
				return false, err
			}
			if _, err := br.Discard(int(size) + 2); err != nil {
				return false, err
			}
			if size == 0 {
				return keep, nil
			}
		}
	case length >= 0:
		_, err = br.Discard(length)
		return keep, err
	default:
		_, err = io.Copy(io.Discard, br)
		return false, err
	}
}
