package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/freeport"
)

// TestIntegrationKustomizeAndHelm boots a real instance of examples/hello-charts, whose workloads
// come from a Kustomize overlay and a Helm chart rendered at build time, and shows both serving
// through the load balancer with what the overlay and the chart's values say, in the namespaces
// they name, and calling each other by Service name through the DNS add-on.
func TestIntegrationKustomizeAndHelm(t *testing.T) {
	e := newEnv(t, building("examples/hello-charts/image.yaml"))
	overlayPort, chartPort := freeport.TCP(t), freeport.TCP(t)
	e.startTwoListenerFleet("charts", "hello-charts",
		"overlay", overlayPort, "chart", chartPort)
	inst := e.waitServing(1)[0].Metadata.Name

	for _, c := range []struct {
		listener  string
		port      int
		revision  string // examples/hello-charts: the overlay's patch, and the chart's inline value
		podPrefix string // the overlay's namePrefix, and the chart's release name
	}{
		{"overlay", overlayPort, "kustomize-prod", "prod-hello-"},
		{"chart", chartPort, "chart-v2", "web-greeter-"},
	} {
		var got struct{ Pod, Revision string }
		e.waitFor(30*time.Second, 250*time.Millisecond, func() string {
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", c.port))
			if err != nil {
				return c.listener + ": " + err.Error()
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &got) != nil {
				return fmt.Sprintf("%s: %s %s", c.listener, resp.Status, body)
			}
			return ""
		})
		if got.Revision != c.revision || !strings.HasPrefix(got.Pod, c.podPrefix) {
			t.Errorf("the %s listener answered from pod %q revision %q, want a pod %s* with revision %q", c.listener, got.Pod, got.Revision, c.podPrefix, c.revision)
		}
	}

	// Two Deployments talking by Service name: the overlay's hello fetches the chart's greeter at
	// web-greeter.greeter.svc.cluster.local, which only the instance's cluster DNS resolves.
	var relayed struct{ Pod, Revision string }
	e.waitFor(30*time.Second, 250*time.Millisecond, func() string {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/upstream", overlayPort))
		if err != nil {
			return "GET /upstream: " + err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &relayed) != nil {
			return fmt.Sprintf("GET /upstream: %s %s", resp.Status, body)
		}
		return ""
	})
	if relayed.Revision != "chart-v2" || !strings.HasPrefix(relayed.Pod, "web-greeter-") {
		t.Errorf("GET /upstream relayed pod %q revision %q, want the chart's greeter", relayed.Pod, relayed.Revision)
	}

	// The overlay's namespace, and the chart's release namespace made at boot with the values
	// file's two replicas.
	out, err := e.herdStdout("kubectl", inst, "--", "get", "deployments", "-A", "--no-headers", "-o", "custom-columns=NS:.metadata.namespace,NAME:.metadata.name,READY:.status.readyReplicas")
	if err != nil {
		t.Fatalf("herd kubectl %s -- get deployments: %v\n%s", inst, err, out)
	}
	for _, want := range []string{"shop prod-hello 1", "greeter web-greeter 2"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("deployments of %s lack %q:\n%s", inst, want, out)
		}
	}
}
