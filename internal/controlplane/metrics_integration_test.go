package controlplane_test

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/client"
)

// scrape sends GET /metrics to the cluster's API with the bearer token tok ("" for none).
func (c *cluster) scrape(tok string) (int, string, error) {
	req, err := http.NewRequest("GET", "http://"+c.addr+"/metrics", nil)
	if err != nil {
		return 0, "", err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// TestIntegrationMetrics scrapes herd up's /metrics as Prometheus does, with the API's token, and
// finds the load balancer's and the controller's metric families; without the token it is refused.
func TestIntegrationMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	c, lbPort := loopbackFleet(t, 2, nil, "  replicas: {min: 1, max: 5, desired: 2}\n")
	cfg, err := client.LoadConfig(filepath.Join(c.dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	// Requests through the load balancer, so that its per-target families have samples.
	hc := &http.Client{Timeout: 2 * time.Second}
	c.waitFor(20*time.Second, func() string {
		if err := getHello(hc, fmt.Sprintf("http://127.0.0.1:%d/", lbPort)); err != nil {
			return "the fleet does not answer yet: " + err.Error()
		}
		return ""
	})

	families := []string{
		"herd_lb_requests_total", "herd_lb_request_duration_seconds", "herd_lb_target_healthy", "herd_lb_bad_requests_total",
		"herd_controller_reconciles_total", "herd_controller_reconcile_errors_total", "herd_controller_synced",
		"herd_fleets", "herd_instances", "herd_workqueue_depth", "herd_workqueue_work_duration_seconds",
		"herd_instance_phase", "herd_instance_lb_state", "herd_instance_agent_up", "herd_fleet_replicas", "herd_fleet_condition",
		"herd_provider_call_duration_seconds", "herd_events_total",
		"go_goroutines", "process_resident_memory_bytes",
	}
	var body string
	c.waitFor(10*time.Second, func() string {
		code, b, err := c.scrape(cfg.Token)
		if err != nil || code != http.StatusOK {
			return fmt.Sprintf("GET /metrics: %d %v", code, err)
		}
		body = b
		for _, f := range families {
			if !strings.Contains(body, "# TYPE "+f+" ") {
				return "no metric family " + f
			}
		}
		if !strings.Contains(body, `herd_instances{fleet="web",phase="Ready"} 2`) {
			return "herd_instances does not count web's two Ready instances"
		}
		// The controller asked the fake provider for web's two instances.
		if !strings.Contains(body, `herd_provider_call_duration_seconds_count{op="create",provider="fake"} 2`) {
			return "herd_provider_call_duration_seconds does not count the two creates"
		}
		return ""
	})

	for _, tok := range []string{"", "not-the-token"} {
		code, b, err := c.scrape(tok)
		if err != nil {
			t.Fatal(err)
		}
		if code != http.StatusUnauthorized || strings.Contains(b, "herd_") {
			t.Errorf("GET /metrics with token %q: %d, %d bytes; want a bare 401", tok, code, len(b))
		}
	}
}
