//go:build tenancy

package e2e

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The isolation figure: tenant b's p99 with tenant a flooded, against b's p99 without the flood.
// The machine's other work moves b's p99 from one second to the next by more than a's flood
// does, so the two p99s come from one run in which the flood takes turns: it runs in short slices,
// stopped (SIGSTOP) and continued (SIGCONT) between them, in a random order within each pair of
// slices, while b's client sends one request every 10 ms throughout. Each of b's answers counts
// for the slice its request was sent in; the first settle of each slice is left out, while a's
// requests in flight drain or its clients start again. The machine's noise so falls on both sides
// alike, and does not decide which side is slower.

// isolation is what one interleaved measurement found.
type isolation struct {
	alone, flooded     time.Duration // b's p99 without and with the flood
	aloneN, floodedN   int           // b's answers counted on each side
	failed             int           // b's requests that failed
	aSent, aRefused    int           // the flood's requests, and those not answered 200
	floodOn            time.Duration // how long the flood ran
	parts              []float64     // the ratio of each quarter of the run
	loadStart, loadEnd string
}

func (iso isolation) ratio() float64 { return float64(iso.flooded) / float64(iso.alone) }

// sample is one request of b's: when it was sent, how long its answer took, and whether it failed.
type sample struct {
	at   time.Time
	took time.Duration
	err  error
}

// slice is one turn of the flood, on or off.
type slice struct {
	from, to time.Time // the part of the slice that counts: after its settle
	on       bool
	part     int
}

// measureIsolation floods tenant a with clients unpaced clients capped to cpus CPUs, in pairs
// of slices of length each (cycles pairs), and measures b's p99 on each side. flooding returns
// once the flood's requests reach the load balancer.
func measureIsolation(t *testing.T, url string, clients int, cpus float64, cycles int, length, settle time.Duration, flooding func()) isolation {
	t.Helper()
	iso := isolation{loadStart: loadAvg()}
	f := startFlood(t, url, "a", clients, cpus)
	flooding()
	f.signal(t, syscall.SIGSTOP)

	stop := make(chan struct{})
	got := make(chan []sample, 1)
	go func() { got <- paced(url, "b", 10*time.Millisecond, stop) }()

	const parts = 4
	var slices []slice
	for c := range cycles {
		order := []bool{false, true}
		if rand.N(2) == 0 {
			order = []bool{true, false}
		}
		for _, on := range order {
			if on {
				f.signal(t, syscall.SIGCONT)
			} else {
				f.signal(t, syscall.SIGSTOP)
			}
			start := time.Now()
			// The slice is a window of the measurement: its length is the schedule, not a wait
			// for something to happen.
			time.Sleep(length)
			end := time.Now()
			if on {
				iso.floodOn += end.Sub(start)
			}
			slices = append(slices, slice{from: start.Add(settle), to: end, on: on, part: c * parts / cycles})
		}
	}
	close(stop)
	samples := <-got
	f.signal(t, syscall.SIGCONT)
	iso.aSent, iso.aRefused, _ = f.stop(t)
	iso.loadEnd = loadAvg()

	var alone, flooded [parts][]time.Duration
	i := 0
	for _, s := range samples {
		if s.err != nil {
			iso.failed++
			continue
		}
		for i < len(slices) && !s.at.Before(slices[i].to) {
			i++
		}
		if i == len(slices) {
			break
		}
		sl := slices[i]
		switch {
		case s.at.Before(sl.from):
		case sl.on:
			flooded[sl.part] = append(flooded[sl.part], s.took)
		default:
			alone[sl.part] = append(alone[sl.part], s.took)
		}
	}
	var allAlone, allFlooded []time.Duration
	for p := range parts {
		iso.parts = append(iso.parts, float64(p99Of(flooded[p]))/float64(p99Of(alone[p])))
		allAlone = append(allAlone, alone[p]...)
		allFlooded = append(allFlooded, flooded[p]...)
	}
	iso.alone, iso.flooded = p99Of(allAlone), p99Of(allFlooded)
	iso.aloneN, iso.floodedN = len(allAlone), len(allFlooded)
	return iso
}

// String says what the measurement found, for the test's log.
func (iso isolation) String() string {
	parts := make([]string, len(iso.parts))
	for i, r := range iso.parts {
		parts[i] = fmt.Sprintf("%.2f", r)
	}
	return fmt.Sprintf("tenant b p99 %.2f ms without the flood (%d answers), %.2f ms with it (%d answers): %.2fx (quarters of the run: %s); %d of b failed; a: %.0f requests/s while flooding, %d not answered 200; load average %s at the start, %s at the end",
		ms(iso.alone), iso.aloneN, ms(iso.flooded), iso.floodedN, iso.ratio(), strings.Join(parts, ", "), iso.failed,
		float64(iso.aSent)/iso.floodOn.Seconds(), iso.aRefused, iso.loadStart, iso.loadEnd)
}

// paced sends a request for tenant every pace until stop is closed, and returns them all.
func paced(url, tenant string, pace time.Duration, stop <-chan struct{}) []sample {
	c := tenantClient(tenant, 5*time.Second)
	defer c.CloseIdleConnections()
	tick := time.NewTicker(pace)
	defer tick.Stop()
	var out []sample
	for {
		select {
		case <-stop:
			return out
		case <-tick.C:
		}
		start := time.Now()
		r := get(c, url)
		out = append(out, sample{at: start, took: time.Since(start), err: r.err})
	}
}

// p99Of returns the 99th percentile of ds; 0 when there are none.
func p99Of(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)*99+99)/100-1]
}

// signal sends sig to the flood process: SIGSTOP holds all its clients at once, SIGCONT lets
// them go on.
func (f *flood) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if err := f.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("the flood process: %v", err)
	}
}
