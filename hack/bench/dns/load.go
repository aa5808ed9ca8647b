package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

var qpsLine = regexp.MustCompile(`Queries per second:\s+([0-9.]+)`)
var lostLine = regexp.MustCompile(`Queries lost:\s+(\d+)`)

// saturate drives the server with dnsperf (on the load CPU) for d and returns the queries per
// second it answered and the server's CPU time (user and system) per query, which stays
// comparable when dnsperf's core, not the server, is what saturates.
func saturate(ctx context.Context, s *server, cpu, work string, d time.Duration, clients, outstanding int) (qps float64, cpuPerQuery time.Duration, err error) {
	file := filepath.Join(work, "queries.txt")
	if err := os.WriteFile(file, []byte(strings.Join(queries, "\n")+"\n"), 0o600); err != nil {
		return 0, 0, err
	}
	args := []string{"-c", cpu, "dnsperf", "-s", "127.0.0.1", "-p", strconv.Itoa(s.port), "-d", file,
		"-l", strconv.Itoa(int(d.Seconds())), "-c", strconv.Itoa(clients), "-q", strconv.Itoa(outstanding), "-t", "2"}
	before, err := cpuTime(s.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	out, err := exec.CommandContext(ctx, "taskset", args...).CombinedOutput()
	if err != nil {
		return 0, 0, fmt.Errorf("dnsperf against %s: %w\n%s", s.name, err, out)
	}
	after, err := cpuTime(s.cmd.Process.Pid)
	if err != nil {
		return 0, 0, err
	}
	m := qpsLine.FindSubmatch(out)
	if m == nil {
		return 0, 0, fmt.Errorf("dnsperf against %s printed no queries per second:\n%s", s.name, out)
	}
	if lost := lostLine.FindSubmatch(out); lost != nil && string(lost[1]) != "0" {
		logf("%s: dnsperf lost %s queries (those outstanding when it stopped count too)", s.name, lost[1])
	}
	if qps, err = strconv.ParseFloat(string(m[1]), 64); err != nil || qps == 0 {
		return 0, 0, fmt.Errorf("dnsperf against %s: queries per second %q", s.name, m[1])
	}
	return qps, time.Duration(float64(after-before) / (qps * d.Seconds())), nil
}

// cpuTime is the user and system time pid has used (/proc/PID/stat, in clock ticks of 10 ms).
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command name, which is in parentheses and may hold spaces.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	if len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// latency sends queries at a fixed rate for d, from this process (on the load CPU), and returns
// the 99th percentile of their latency. Each query's latency counts from when it was due, not
// when it left, so a stalled sender does not hide a slow server (coordinated omission); a query
// unanswered after a second counts as a second.
func latency(s *server, rate float64, d time.Duration) (p99 time.Duration, lost int, err error) {
	conn, err := net.Dial("udp", fmt.Sprintf("127.0.0.1:%d", s.port))
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close()
	if err := conn.(*net.UDPConn).SetReadBuffer(8 << 20); err != nil {
		return 0, 0, err
	}
	var packets [][]byte
	for _, q := range queries {
		name, typ, _ := strings.Cut(q, " ")
		m := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.StringToType[typ])
		b, err := m.Pack()
		if err != nil {
			return 0, 0, err
		}
		packets = append(packets, b)
	}

	var mu sync.Mutex
	due := make([]time.Time, 1<<16) // by query id
	var lat []time.Duration
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			now := time.Now()
			if n < 2 {
				continue
			}
			id := int(buf[0])<<8 | int(buf[1])
			mu.Lock()
			if !due[id].IsZero() {
				lat = append(lat, now.Sub(due[id]))
				due[id] = time.Time{}
			}
			mu.Unlock()
		}
	}()
	start := time.Now()
	total := int(rate * d.Seconds())
	for sent := 0; sent < total; {
		// Sleep rather than spin even when the next query is due very soon: the receiver shares
		// this process's one CPU, and a spinning sender would starve it until the socket's buffer
		// overflows.
		next := start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
		time.Sleep(max(time.Until(next), 50*time.Microsecond))
		// Send every query due by now.
		for ; sent < total && !start.Add(time.Duration(float64(sent)/rate*float64(time.Second))).After(time.Now()); sent++ {
			id := sent & 0xffff
			p := packets[sent%len(packets)]
			p[0], p[1] = byte(id>>8), byte(id)
			mu.Lock()
			if !due[id].IsZero() {
				lat = append(lat, time.Second) // its id comes round again: lost
				lost++
			}
			due[id] = start.Add(time.Duration(float64(sent) / rate * float64(time.Second)))
			mu.Unlock()
			if _, err := conn.Write(p); err != nil {
				return 0, 0, err
			}
		}
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	for _, t := range due {
		if !t.IsZero() {
			lat = append(lat, time.Second)
			lost++
		}
	}
	if len(lat) == 0 {
		return 0, lost, fmt.Errorf("%s answered nothing", s.name)
	}
	slices.Sort(lat)
	return lat[len(lat)*99/100], lost, nil
}

func median[T int | float64 | time.Duration](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
