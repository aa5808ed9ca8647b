// The work an idle instance does, counted from its components' own metrics at both ends of the
// idle windows: what explains the CPU they take.

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
)

// source is one component's /metrics.
type source struct {
	name  string
	fetch func(ctx context.Context) (*http.Response, error)
}

// tally is one count of work: a metric family of one source, summed by some of its labels.
type tally struct {
	source, family, what string
	by                   []string
}

// tallies are the counts printed, in this order. kube-combined's /metrics (the API server's) is
// every component's of the process: the kubelet's, the controllers' work queues, the Go runtime's.
var tallies = []tally{
	{"kube-combined", "apiserver_request_total", "API requests by verb and resource", []string{"verb", "resource", "subresource"}},
	{"kube-combined", "apiserver_flowcontrol_dispatched_requests_total", "API requests by flow schema (which client; exempt: herd-agent and this bench)", []string{"flow_schema"}},
	{"kube-combined", "etcd_requests_total", "the API server's etcd requests", []string{"operation", "type"}},
	{"kube-combined", "kubelet_pleg_relist_duration_seconds", "kubelet relists", nil},
	{"kube-combined", "kubelet_runtime_operations_total", "kubelet runtime (CRI) operations", []string{"operation_type"}},
	{"kube-combined", "workqueue_adds_total", "controller work queue adds", []string{"name"}},
	{"etcd", "grpc_server_handled_total", "etcd gRPC requests handled", []string{"grpc_method"}},
	{"herd-agent", "herd_agent_api_requests_total", "herd-agent's API requests", []string{"verb", "resource"}},
}

// goTallies are counted for every source: its garbage collections and allocated bytes.
var goTallies = []tally{
	{"", "go_gc_duration_seconds", "GC cycles", nil},
	{"", "go_memstats_alloc_bytes_total", "bytes allocated", nil},
}

// goGauges are read for every source at the end of the windows: where its own memory (RssAnon)
// goes, the Go heap against the rest.
var goGauges = []tally{
	{"", "go_memstats_heap_inuse_bytes", "heap in use bytes", nil},
	{"", "go_memstats_next_gc_bytes", "heap goal bytes", nil},
	{"", "go_memstats_heap_idle_bytes", "heap idle bytes", nil},
	{"", "go_memstats_heap_released_bytes", "heap released bytes", nil},
	{"", "go_memstats_stack_inuse_bytes", "stacks bytes", nil},
	{"", "go_memstats_sys_bytes", "from the OS bytes", nil},
	{"", "go_goroutines", "goroutines", nil},
}

// workSources are the instance's metrics endpoints: the API server's with the administrator
// kubeconfig, etcd's on loopback inside the instance's network namespace, the agent's with the
// instance's credential (as herd up scrapes it).
func workSources(kubeconfig, netns string, agentAddr, credential string) ([]source, error) {
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	api, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	get := func(ctx context.Context, c *http.Client, url string, prep func(*http.Request)) (*http.Response, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "text/plain;version=0.0.4")
		if prep != nil {
			prep(req)
		}
		return c.Do(req)
	}
	etcd := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return hostnet.DialInNetns(ctx, netns, network, addr)
		},
		DisableKeepAlives: true,
	}}
	plain := &http.Client{Timeout: 10 * time.Second}
	agentURL := "http://" + net.JoinHostPort(agentAddr, strconv.Itoa(agent.DefaultPort)) + "/metrics"
	return []source{
		{"kube-combined", func(ctx context.Context) (*http.Response, error) {
			return get(ctx, api, strings.TrimSuffix(rc.Host, "/")+"/metrics", nil)
		}},
		{"etcd", func(ctx context.Context) (*http.Response, error) {
			return get(ctx, etcd, "http://127.0.0.1:2379/metrics", nil)
		}},
		{"herd-agent", func(ctx context.Context) (*http.Response, error) {
			return get(ctx, plain, agentURL, func(r *http.Request) { agentauth.Authorize(r, credential) })
		}},
	}, nil
}

// counts are the values of the tallies at one time: source -> what -> label values -> value.
type counts map[string]map[string]map[string]float64

// readCounts reads every source's tallies; a source that cannot be read is reported and left out.
func readCounts(ctx context.Context, srcs []source) counts {
	out := counts{}
	for _, s := range srcs {
		fams, err := readFamilies(ctx, s)
		if err != nil {
			fmt.Printf("  work counts: %s: %v\n", s.name, err)
			continue
		}
		out[s.name] = map[string]map[string]float64{}
		for _, t := range slices.Concat(tallies, goTallies, goGauges) {
			if t.source != "" && t.source != s.name {
				continue
			}
			if f, ok := fams[t.family]; ok {
				out[s.name][t.what] = sumBy(f, t.by)
			}
		}
	}
	return out
}

func readFamilies(ctx context.Context, s source) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := s.fetch(ctx)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil, fmt.Errorf("status %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// sumBy sums a family's counters (a histogram's or summary's count of observations) by the
// values of the labels by, joined by spaces.
func sumBy(f *dto.MetricFamily, by []string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range f.GetMetric() {
		var v float64
		switch {
		case m.Counter != nil:
			v = m.Counter.GetValue()
		case m.Histogram != nil:
			v = float64(m.Histogram.GetSampleCount())
		case m.Summary != nil:
			v = float64(m.Summary.GetSampleCount())
		case m.Untyped != nil:
			v = m.Untyped.GetValue()
		case m.Gauge != nil:
			v = m.Gauge.GetValue()
		}
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		var key []string
		for _, b := range by {
			if labels[b] != "" {
				key = append(key, labels[b])
			}
		}
		out[strings.Join(key, " ")] += v
	}
	return out
}

// printWork prints under heading what each tally counted between before and after, over took:
// its total and its largest parts.
func printWork(heading string, before, after counts, took time.Duration) {
	fmt.Println(heading)
	for _, src := range []string{"kube-combined", "etcd", "herd-agent"} {
		for _, t := range append(tallies, goTallies...) {
			if t.source != "" && t.source != src {
				continue
			}
			a, ok := after[src][t.what]
			if !ok {
				continue
			}
			b := before[src][t.what]
			type part struct {
				key string
				n   float64
			}
			var parts []part
			var total float64
			for k, v := range a {
				if d := v - b[k]; d > 0 {
					parts = append(parts, part{k, d})
					total += d
				}
			}
			sort.Slice(parts, func(i, j int) bool {
				if parts[i].n != parts[j].n {
					return parts[i].n > parts[j].n
				}
				return parts[i].key < parts[j].key
			})
			line := fmt.Sprintf("  %s, %s: %s (%.2f/s)", src, t.what, amount(t.what, total), total/took.Seconds())
			if len(t.by) > 0 {
				var ps []string
				for i, p := range parts {
					if i == 12 {
						ps = append(ps, fmt.Sprintf("%d more", len(parts)-i))
						break
					}
					ps = append(ps, fmt.Sprintf("%s %s", p.key, amount(t.what, p.n)))
				}
				if len(ps) > 0 {
					line += ": " + strings.Join(ps, ", ")
				}
			}
			fmt.Println(line)
		}
	}
}

// printGoMemory prints each source's Go memory as last read: the heap in use and its goal, the
// heap's pages kept from the OS while idle, the goroutines' stacks.
func printGoMemory(c counts) {
	fmt.Println("Go memory at the end (MB):")
	for _, src := range []string{"kube-combined", "etcd", "herd-agent"} {
		g, ok := c[src]
		if !ok {
			continue
		}
		v := func(what string) float64 { return g[what][""] }
		fmt.Printf("  %s: heap in use %.1f, goal %.1f, idle kept %.1f, stacks %.1f (%.0f goroutines), from the OS %.1f\n",
			src, v("heap in use bytes")/1e6, v("heap goal bytes")/1e6,
			(v("heap idle bytes")-v("heap released bytes"))/1e6, v("stacks bytes")/1e6, v("goroutines"),
			v("from the OS bytes")/1e6)
	}
}

// amount prints a count, bytes in MB.
func amount(what string, n float64) string {
	if strings.Contains(what, "bytes") {
		return fmt.Sprintf("%.1f MB", n/1e6)
	}
	return strconv.FormatFloat(n, 'f', 0, 64)
}

// scrapeEvery reads s every interval until ctx ends, as herd up reads every serving instance's
// agent (internal/agentmetrics): part of the instance's idle work wherever herd serves it.
func scrapeEvery(ctx context.Context, s source, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if resp, err := s.fetch(ctx); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// instanceSources are workSources of the instance in.
func instanceSources(p *local.Provider, in provider.Instance, keys *agentauth.Keyring) ([]source, error) {
	netns, _, _ := local.HostNames(in.Name)
	kubeconfig := filepath.Join(p.InstanceDir(in.Name), "agent", agent.KubeconfigFile)
	return workSources(kubeconfig, netns, in.Address, keys.Credential(in.Name))
}

// instanceWork reads the tallies of the instance in: what its components counted since they
// started.
func instanceWork(ctx context.Context, p *local.Provider, in provider.Instance, keys *agentauth.Keyring) (counts, error) {
	srcs, err := instanceSources(p, in, keys)
	if err != nil {
		return nil, err
	}
	return readCounts(ctx, srcs), nil
}
