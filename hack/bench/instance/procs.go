// What the instance's processes hold and spend while it idles: each process's RSS (and the part
// of it that is its own), its CPU over the idle window, and the cgroup subtree's CPU as a whole.

package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"herd.dev/herd/internal/provider/local/localtest"
)

// clockTick is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTick = 10 * time.Millisecond

type procRSS struct {
	name  string // comm[pid]
	comm  string
	pid   int
	rssKB int64
	// anonKB is the part of rssKB that is the process's own (RssAnon): the rest is mostly the
	// binary's pages, shared in the page cache with every instance running the same binary.
	anonKB int64
	// cpu is the CPU time the process had used when it was read, then (cpuOver) what it used
	// over the idle window; cores is the latter per second of the window.
	cpu   time.Duration
	cores float64
	// sw are the process's context switches when it was read, then (cpuOver) over the idle
	// window; wakeups and preempts are the voluntary and involuntary ones per second of it.
	sw                switches
	wakeups, preempts float64
}

// cgroupProcs reads the RSS and the CPU time so far of every process of the cgroup subtree root
// in every hierarchy, largest RSS first.
func cgroupProcs(root string) ([]procRSS, error) {
	pids, err := localtest.CgroupPIDs(root)
	if err != nil {
		return nil, err
	}
	if len(pids) == 0 {
		return nil, fmt.Errorf("no process in the cgroup %s", root)
	}
	var out []procRSS
	for _, pid := range pids {
		name, kb, anon, ok := readRSS(pid)
		if !ok {
			continue
		}
		cpu, _ := procCPU(pid)
		sw, _ := procSwitches(pid)
		out = append(out, procRSS{name: fmt.Sprintf("%s[%d]", name, pid), comm: name, pid: pid, rssKB: kb, anonKB: anon, cpu: cpu, sw: sw})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].rssKB > out[j].rssKB })
	return out, nil
}

// cpuOver turns each process's CPU time and context switches, read by cgroupProcs, into what it
// used and did since, over a window of took. A process gone since counts nothing.
func cpuOver(procs []procRSS, took time.Duration) {
	for i := range procs {
		pr := &procs[i]
		now, ok := procCPU(pr.pid)
		sw, swOK := procSwitches(pr.pid)
		if !ok || !swOK || now < pr.cpu {
			pr.cpu, pr.cores, pr.sw, pr.wakeups, pr.preempts = 0, 0, switches{}, 0, 0
			continue
		}
		pr.cpu = now - pr.cpu
		pr.cores = pr.cpu.Seconds() / took.Seconds()
		pr.sw = sw.since(pr.sw)
		pr.wakeups = float64(pr.sw.voluntary) / took.Seconds()
		pr.preempts = float64(pr.sw.involuntary) / took.Seconds()
	}
}

// printProcs prints one line per process (RSS, its own part, CPU, wakeups and preemptions over
// the window, and the CPU per wakeup) and their sums, and returns the sum of RSS in kB.
func printProcs(procs []procRSS) (rssKB int64) {
	var anon int64
	var cores, wakeups, preempts float64
	for _, pr := range procs {
		fmt.Printf("  %-28s %7.1f MB (own %5.1f MB) %6.4f core %7.1f wakeups/s %5.1f preempted/s %s\n", pr.name, float64(pr.rssKB)/1024, float64(pr.anonKB)/1024,
			pr.cores, pr.wakeups, pr.preempts, perWakeup(pr.cores, pr.wakeups))
		rssKB, anon = rssKB+pr.rssKB, anon+pr.anonKB
		cores, wakeups, preempts = cores+pr.cores, wakeups+pr.wakeups, preempts+pr.preempts
	}
	fmt.Printf("idle RSS of %d processes: %.1f MB, of which their own (RssAnon; the rest is mostly binaries' pages, shared between instances): %.1f MB; their CPU %.4f core\n",
		len(procs), float64(rssKB)/1024, float64(anon)/1024, cores)
	fmt.Printf("their wakeups (voluntary context switches, every thread): %.1f a second, %s; preempted %.1f times a second (the machine's contention)\n",
		wakeups, perWakeup(cores, wakeups), preempts)
	return rssKB
}

// perWakeup says how much CPU a process used per wakeup: what the machine makes a wakeup cost.
func perWakeup(cores, wakeups float64) string {
	if wakeups == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f µs of CPU per wakeup", cores/wakeups*1e6)
}

func readRSS(pid int) (name string, rssKB, anonKB int64, ok bool) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "", 0, 0, false
	}
	defer f.Close()
	kb := func(v string) int64 {
		n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		switch k {
		case "Name":
			name = strings.TrimSpace(v)
		case "VmRSS":
			rssKB = kb(v)
		case "RssAnon":
			anonKB = kb(v)
		}
	}
	return name, rssKB, anonKB, name != ""
}

// procCPU is the CPU time (user and system) process pid has used.
func procCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	return statCPU(string(data))
}

// statCPU reads utime and stime from a /proc/<pid>/stat line: fields 14 and 15, counted after the
// command name, which may hold spaces and parentheses.
func statCPU(stat string) (time.Duration, bool) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * clockTick, true
}

// cpuUsage is the CPU time the cgroup subtree root has used: cpuacct.usage on cgroup v1,
// cpu.stat usage_usec on v2.
func cpuUsage(root string) (time.Duration, error) {
	hier, err := localtest.CgroupHierarchies()
	if err != nil {
		return 0, err
	}
	for _, h := range hier {
		if data, err := os.ReadFile(filepath.Join(h, root, "cpuacct.usage")); err == nil {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("cpuacct.usage of %s: %w", root, err)
			}
			return time.Duration(ns), nil
		}
	}
	for _, h := range hier {
		data, err := os.ReadFile(filepath.Join(h, root, "cpu.stat"))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "usage_usec "); ok {
				us, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("cpu.stat of %s: %w", root, err)
				}
				return time.Duration(us) * time.Microsecond, nil
			}
		}
	}
	return 0, fmt.Errorf("no CPU accounting (cpuacct.usage or cpu.stat) for the cgroup %s", root)
}
