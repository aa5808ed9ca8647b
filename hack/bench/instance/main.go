// Command instance benchmarks one real local instance of the hello example (make bench-instance):
//
//   - boot_to_ready_s: the median over -runs creates of the time from the provider's Create to the
//     hello app answering on the instance's address (NodePort 30080), one instance at a time;
//     beside it, the CPU the instance's cgroup used until then (and the median of that);
//   - idle_rss_mb: after the last instance has idled -idle, the sum of VmRSS of every process in
//     its cgroup subtree (the agent, etcd, containerd, the Kubernetes components, shims and pods);
//     it prints each process (with its RssAnon, what is its own and not shared page cache) and
//     each pod's processes (pause, containers and the shim), the add-ons being kube-system's;
//   - idle_cpu_cores: the median over -windows back-to-back windows of -window each of the CPU
//     time its cgroup used (cpuacct), per second; each process's and each pod's line says its own
//     share over all the windows (its utime and stime) and how often it woke (its threads'
//     voluntary context switches; the involuntary ones are the machine's contention), which,
//     unlike the CPU a wakeup costs, does not depend on the machine; the work counts beside them (API
//     requests, etcd requests, the kubelet's relists and runtime calls, garbage collections and
//     allocations, the agent's own requests) are read from the components' metrics before the
//     first window and after the last. Meanwhile the agent's /metrics is read every -scrape, as
//     herd up reads every instance it serves.
//
// It runs as root on a data directory of its own, and removes every instance it created and the
// data directory on exit, also on Ctrl-C and SIGTERM. The last line is:
//
//	instance: boot_to_ready_s=<float> idle_rss_mb=<int> idle_cpu_cores=<float>
//
// With -logs DIR, each instance's logs (the agent's and its components') are copied to
// DIR/<instance> before the instance is deleted, for reading its boot in the components' own
// timestamps.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

const appPort = 30080

func main() {
	herd := flag.String("herd", "bin/herd", "the herd binary; instances run the herd-agent beside it (make build)")
	nodeImage := flag.String("image", "examples/hello/image.yaml", "the NodeImage to boot")
	runs := flag.Int("runs", 3, "creates to take the median boot time of")
	idle := flag.Duration("idle", 30*time.Second, "how long the last instance idles before its memory is measured")
	window := flag.Duration("window", 30*time.Second, "length of each window over which idle CPU is measured")
	windows := flag.Int("windows", 5, "back-to-back windows to take the median idle CPU of")
	scrape := flag.Duration("scrape", 2*time.Second, "how often the agent's /metrics is read while the instance idles, as herd up does (0: never)")
	logs := flag.String("logs", "", "a directory to copy each instance's logs to, one subdirectory per instance")
	flag.Parse()
	// Interrupted, it deletes what it created before it exits. Its output may go nowhere by then
	// (Ctrl-C on make bench-instance | tee stops tee too): SIGPIPE would kill it mid-cleanup.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	line, err := run(ctx, *herd, *nodeImage, *runs, *idle, idleCPU{window: *window, windows: *windows, scrape: *scrape}, *logs)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-instance:", err)
		os.Exit(1)
	}
	fmt.Println(line)
}

// idleCPU is how idle CPU is measured.
type idleCPU struct {
	window  time.Duration
	windows int
	scrape  time.Duration
}

func run(ctx context.Context, herdBin, nodeImage string, runs int, idle time.Duration, m idleCPU, logs string) (string, error) {
	if runs < 1 {
		return "", errors.New("-runs must be at least 1")
	}
	if m.windows < 1 || m.window <= 0 {
		return "", errors.New("-windows must be at least 1 and -window positive")
	}
	herdBin, err := filepath.Abs(herdBin)
	if err != nil {
		return "", err
	}
	if err := local.CheckHost(herdBin); err != nil {
		return "", err
	}
	// One at a time with the tests that boot real instances: they would compete for the cores.
	fmt.Println("waiting for the real-instance lock")
	unlock, err := localtest.Lock(ctx)
	if err != nil {
		return "", err
	}
	defer unlock()
	// Short: containerd's sockets live in the instance's state directory under it, and a unix
	// socket path has at most 104 usable bytes.
	dataDir, err := os.MkdirTemp("", "hbi-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dataDir)
	fmt.Printf("building %s into %s\n", nodeImage, dataDir)
	b, err := image.Build(ctx, nodeImage, image.NewStore(image.StoreDir(dataDir)), func(s string) { fmt.Println("  " + s) })
	if err != nil {
		return "", err
	}
	keys, err := agentauth.Open(dataDir)
	if err != nil {
		return "", err
	}
	p, err := local.New(local.Options{DataDir: dataDir, HerdBinary: herdBin, Credentials: keys})
	if err != nil {
		return "", err
	}
	var created []string
	defer func() {
		for _, n := range created {
			if err := p.Delete(context.Background(), n); err != nil {
				fmt.Fprintln(os.Stderr, "bench-instance: cleanup:", err)
			}
		}
	}()

	prefix := fmt.Sprintf("bench-%d", os.Getpid())
	var boots, bootCPUs []float64
	var last provider.Instance
	for i := range runs {
		name := fmt.Sprintf("%s-%d", prefix, i)
		created = append(created, name)
		start := time.Now()
		in, err := p.Create(ctx, provider.InstanceSpec{Name: name, Image: b.Digest, Region: "bench"})
		if err != nil {
			return "", err
		}
		createTook := time.Since(start)
		// An instance that does not come up keeps its logs too: they say why.
		keptLogs := filepath.Join(logs, name)
		keepLogsAfter := func(err error) error {
			if logs == "" {
				return err
			}
			if kerr := keepLogs(p.InstanceDir(name), keptLogs); kerr != nil {
				return errors.Join(err, kerr)
			}
			return fmt.Errorf("%w (its logs are in %s)", err, keptLogs)
		}
		if err := waitApp(ctx, p, in, 3*time.Minute); err != nil {
			return "", keepLogsAfter(err)
		}
		answered := time.Since(start)
		// The CPU the instance used to get there: on a busy machine a boot's time moves with
		// the neighbours' load, its CPU much less, so a lever that saves work shows here first.
		_, _, cgroup := local.HostNames(name)
		bootCPU, err := cpuUsage(cgroup)
		if err != nil {
			return "", err
		}
		bootCPUs = append(bootCPUs, bootCPU.Seconds())
		// What the components did to get there, counted from their start: where a boot's CPU
		// goes, by request and by controller.
		bootWork, err := instanceWork(ctx, p, in, keys)
		if err != nil {
			return "", err
		}
		// The instance's own verdict (the agent's, after the workloads' steady wait) comes
		// apart from the app's first answer, and is what herd and the tests wait for.
		if err := waitReady(ctx, p, name, 3*time.Minute); err != nil {
			return "", keepLogsAfter(err)
		}
		ready := time.Since(start)
		boot := answered.Seconds()
		boots = append(boots, boot)
		fmt.Printf("run %d: %s at %s: Create returned in %.3f s, app answered after %.2f s, the instance having used %.2f s of CPU\n",
			i+1, name, in.Address, createTook.Seconds(), boot, bootCPU.Seconds())
		if st, err := agent.ReadStatus(filepath.Join(p.InstanceDir(name), "agent", agent.StatusFile)); err == nil {
			evs := []event{
				{at: createTook, name: "Create returned"},
				{at: answered, name: "app answered from the host"},
				{at: ready, name: "instance Ready (provider)"},
			}
			scheduled, err := scheduledEvents(filepath.Join(p.InstanceDir(name), "agent", agent.KubeconfigFile), start)
			if err != nil {
				return "", err
			}
			started, err := runtimeEvents(filepath.Join(p.InstanceDir(name), "agent", "logs", "containerd.log"), start)
			if err != nil {
				return "", err
			}
			// kube-combined's log, when the components run in it.
			node, err := nodeEvents(filepath.Join(p.InstanceDir(name), "agent", "logs", "kube-combined.log"), start)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return "", err
			}
			fmt.Println(timeline(st, start, slices.Concat(evs, scheduled, started, node)))
		}
		printWork("  work from the components' start to the app's first answer:", nil, bootWork, answered)
		last = in
		if logs != "" {
			if err := keepLogs(p.InstanceDir(name), keptLogs); err != nil {
				return "", err
			}
		}
		if i < runs-1 {
			t := time.Now()
			if err := p.Delete(ctx, name); err != nil {
				return "", err
			}
			created = created[:len(created)-1]
			fmt.Printf("run %d: deleted in %.2f s\n", i+1, time.Since(t).Seconds())
		}
	}

	_, _, root := local.HostNames(last.Name)
	kubeconfig := filepath.Join(p.InstanceDir(last.Name), "agent", agent.KubeconfigFile)
	srcs, err := instanceSources(p, last, keys)
	if err != nil {
		return "", err
	}
	if m.scrape > 0 {
		sctx, stopScrapes := context.WithCancel(ctx)
		defer stopScrapes()
		go scrapeEvery(sctx, srcs[len(srcs)-1], m.scrape)
	}
	fmt.Printf("idling %s before measuring memory\n", idle)
	if err := pause(ctx, idle); err != nil {
		return "", err
	}
	before := readCounts(ctx, srcs)
	procs, err := cgroupProcs(root)
	if err != nil {
		return "", err
	}
	t0 := time.Now()
	var perWindow []float64
	for i := range m.windows {
		u0, err := cpuUsage(root)
		if err != nil {
			return "", err
		}
		w0 := time.Now()
		if err := pause(ctx, m.window); err != nil {
			return "", err
		}
		u1, err := cpuUsage(root)
		if err != nil {
			return "", err
		}
		perWindow = append(perWindow, (u1-u0).Seconds()/time.Since(w0).Seconds())
		fmt.Printf("idle window %d of %d: %.4f core\n", i+1, m.windows, perWindow[i])
	}
	took := time.Since(t0)
	cpuOver(procs, took)
	after := readCounts(ctx, srcs)
	sort.Float64s(perWindow)
	cores := perWindow[len(perWindow)/2]
	fmt.Printf("idle CPU over %d windows of %s: median %.4f core, from %.4f to %.4f; per process over all %.0f s:\n",
		m.windows, m.window, cores, perWindow[0], perWindow[len(perWindow)-1], took.Seconds())
	rss := printProcs(procs)
	if err := podCosts(kubeconfig, procs); err != nil {
		return "", err
	}
	printWork(fmt.Sprintf("work over the same %.0f s (from the components' metrics):", took.Seconds()), before, after, took)
	printGoMemory(after)
	if st, err := p.Get(ctx, last.Name); err != nil || st.State != provider.StateReady {
		return "", fmt.Errorf("the measured instance is not Ready at the end: %+v %v", st, err)
	}
	t := time.Now()
	if err := p.Delete(ctx, last.Name); err != nil {
		return "", err
	}
	created = nil
	fmt.Printf("deleted the last instance in %.2f s\n", time.Since(t).Seconds())
	sort.Float64s(boots)
	sort.Float64s(bootCPUs)
	fmt.Printf("CPU used from Create to the app's first answer: median %.2f s, from %.2f to %.2f s\n",
		bootCPUs[len(bootCPUs)/2], bootCPUs[0], bootCPUs[len(bootCPUs)-1])
	return fmt.Sprintf("instance: boot_to_ready_s=%.2f idle_rss_mb=%d idle_cpu_cores=%.3f",
		boots[len(boots)/2], (rss+512)/1024, cores), nil
}

// waitApp polls the app on the instance's address until it answers 200, failing early when the
// provider reports the instance Failed.
// waitReady polls the provider until the instance is Ready.
func waitReady(ctx context.Context, p *local.Provider, name string, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		st, err := p.Get(ctx, name)
		if err != nil {
			return false, err
		}
		if st.State == provider.StateFailed {
			return false, fmt.Errorf("%s failed: %s", name, st.Reason)
		}
		return st.State == provider.StateReady, nil
	})
}

func waitApp(ctx context.Context, p *local.Provider, in provider.Instance, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	url := fmt.Sprintf("http://%s:%d/", in.Address, appPort)
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		resp, err := client.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if n%25 == 0 {
			if st, err := p.Get(ctx, in.Name); err == nil && st.State == provider.StateFailed {
				return fmt.Errorf("%s failed: %s", in.Name, st.Reason)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the app did not answer on %s within %s", in.Name, url, timeout)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
