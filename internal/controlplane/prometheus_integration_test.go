package controlplane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/freeport"
)

// fakeAgentCores is the CPU the fake agents report using.
const fakeAgentCores = 0.25

// fakeAgents serves an agent's /metrics (a CPU counter growing by fakeAgentCores per second, a
// working set) on 127.1.0.1 to 127.1.0.n at the agents' port, where herd up looks for the agents
// of the fake provider's first instances. It reports false, and serves nothing, when that port is
// taken on one of the addresses (another test's agents).
func fakeAgents(t *testing.T, n int) bool {
	start := time.Now()
	var lns []net.Listener
	for i := 1; i <= n; i++ {
		ln, err := net.Listen("tcp", net.JoinHostPort(fmt.Sprintf("127.1.0.%d", i), strconv.Itoa(agent.DefaultPort)))
		if err != nil {
			t.Logf("no fake agents (%v): the instances' node figures are not checked", err)
			for _, l := range lns {
				l.Close()
			}
			return false
		}
		lns = append(lns, ln)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "herd_node_cpu_seconds_total", Help: "CPU."},
			func() float64 { return time.Since(start).Seconds() * fakeAgentCores }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "herd_node_memory_working_set_bytes", Help: "Memory."},
			func() float64 { return 300 << 20 }),
	)
	for _, ln := range lns {
		metrics := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
		// Whatever credential herd up sends is taken for the instance's, and proved: these agents
		// stand for instances whose names they do not know.
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cred, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			agentauth.Require(cred, metrics).ServeHTTP(w, r)
		})}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return true
}

// startPrometheus runs Debian's prometheus on loopback, scraping the herd up at addr every second
// with the token in tokenFile, until the test ends; it returns the URL of its HTTP API and the
// path of its log.
func startPrometheus(t *testing.T, addr, tokenFile string) (string, string) {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus not found: Debian's prometheus package has it (hack/install-deps.sh installs it)")
	}
	dir := t.TempDir()
	// honor_labels keeps herd's own instance label (the herd instance) instead of renaming it
	// exported_instance; series without one get the target's address as usual.
	config := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 900ms}
scrape_configs:
- job_name: herd
  honor_labels: true
  authorization: {credentials_file: %q}
  static_configs: [{targets: [%q]}]
`, tokenFile, addr)
	configPath := writeFile(t, dir, "prometheus.yml", config)
	port := freeport.TCP(t)
	logPath := filepath.Join(dir, "prometheus.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+configPath, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		logFile.Close()
	})
	return fmt.Sprintf("http://127.0.0.1:%d", port), logPath
}

// promSample is one series of an instant vector.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"` // [unix time, "value"]
}

// query runs an instant PromQL query over Prometheus' HTTP API.
func query(api, q string) ([]promSample, error) {
	resp, err := http.Get(api + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("query %s: %d: %w", q, resp.StatusCode, err)
	}
	if body.Status != "success" || body.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %s: %s %s (%s)", q, body.Status, body.Error, body.Data.ResultType)
	}
	return body.Data.Result, nil
}

// perLabel returns each sample's value by the given label, or why it cannot.
func perLabel(samples []promSample, label string) (map[string]float64, error) {
	out := map[string]float64{}
	for _, s := range samples {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("value %v of %v: %w", s.Value, s.Metric, err)
		}
		out[s.Metric[label]] = v
	}
	return out, nil
}

// loadedFleet runs fleet web of n instances on loopback backends (and fake agents, when their
// port is free) under an in-process control plane, with load through its load balancer; it
// returns the cluster and whether the fake agents serve.
func loadedFleet(t *testing.T, n int) (*cluster, bool) {
	t.Helper()
	manifest, lbPort := loopbackManifest(t, n, nil, fmt.Sprintf("  replicas: {min: 1, max: 5, desired: %d}\n", n))
	agents := fakeAgents(t, n)
	c, cl := inProcess(t)
	applyManifest(t, cl, manifest)
	load(t, lbPort)
	return c, agents
}

// load sends 50 requests a second through the load balancer at lbPort until the test ends.
func load(t *testing.T, lbPort int) {
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { stop(); wg.Wait() })
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		hc := &http.Client{Timeout: 2 * time.Second}
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				_ = getHello(hc, fmt.Sprintf("http://127.0.0.1:%d/", lbPort)) // fails until the fleet serves
			}
		}
	})
}

// TestIntegrationPrometheusScrapesHerd runs a real Prometheus against herd up's control plane (in
// this process, fake provider, loopback backends standing in for three instances' workloads and,
// when the agents' port is free, fake agents for their node figures), sends load through herd's
// load balancer and waits until PromQL gives a request rate above zero for each instance, and each
// instance's CPU and memory under its own name.
func TestIntegrationPrometheusScrapesHerd(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	const n = 3
	c, agents := loadedFleet(t, n)
	promAPI, promLog := startPrometheus(t, c.addr, filepath.Join(c.dir, "data", "token"))

	// waitFor with Prometheus' log on failure too.
	wait := func(what string, cond func() string) {
		t.Helper()
		c.waitFor(90*time.Second, func() string {
			if msg := cond(); msg != "" {
				log, _ := os.ReadFile(promLog)
				return what + ": " + msg + "\nprometheus log (tail):\n" + tail(string(log), 2000)
			}
			return ""
		})
	}
	var rates map[string]float64
	wait("per-instance request rates", func() string {
		samples, err := query(promAPI, `sum by (target) (rate(herd_lb_requests_total{fleet="web"}[30s]))`)
		if err != nil {
			return err.Error()
		}
		if rates, err = perLabel(samples, "target"); err != nil {
			return err.Error()
		}
		if len(rates) != n {
			return fmt.Sprintf("%d series %v, want one per instance (%d)", len(rates), rates, n)
		}
		for target, r := range rates {
			if !strings.HasPrefix(target, "web-") || r <= 0 {
				return fmt.Sprintf("target %q at %v requests/s, want an instance of web above 0: %v", target, r, rates)
			}
		}
		return ""
	})
	t.Logf("requests/s per instance, from Prometheus: %v", sorted(rates))

	if !agents {
		return
	}
	wait("per-instance node figures", func() string {
		for _, q := range []string{`herd_instance_cpu_cores{fleet="web"}`, `herd_instance_memory_bytes{fleet="web"}`} {
			samples, err := query(promAPI, q)
			if err != nil {
				return err.Error()
			}
			byInstance, err := perLabel(samples, "instance")
			if err != nil {
				return err.Error()
			}
			for inst, v := range byInstance {
				if _, ok := rates[inst]; !ok || v <= 0 {
					return fmt.Sprintf("%s: instance %q at %v, want one of %v above 0", q, inst, v, sorted(rates))
				}
			}
			if len(byInstance) != n {
				return fmt.Sprintf("%s: %v, want one series per instance", q, byInstance)
			}
		}
		return ""
	})
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func sorted(m map[string]float64) []string {
	var out []string
	for k, v := range m {
		out = append(out, fmt.Sprintf("%s=%.1f", k, v))
	}
	sort.Strings(out)
	return out
}
