package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/addons"
	"herd.dev/herd/internal/freeport"
	"herd.dev/herd/internal/provider/local/localtest"
)

// TestIntegrationAddons boots a real instance of test/e2e/testdata/addons with every add-on on
// (the default) and shows each at work: "front" calls "back" by Service name (cluster DNS), a
// pod writes and reads a PersistentVolumeClaim that the default StorageClass bound to a directory
// of the instance, and the same again after the pod is replaced, and the directory and the volume
// go once the claim is deleted (storage), and `kubectl top node`, `kubectl top pods` and a
// HorizontalPodAutoscaler read metrics-server, which the node runs in its kube-combined process,
// not as a pod, inside the instance (resource metrics).
func TestIntegrationAddons(t *testing.T) {
	e := newEnv(t, building("test/e2e/testdata/addons/image.yaml"))
	frontPort, notesPort := freeport.TCP(t), freeport.TCP(t)
	e.startTwoListenerFleet("addons", "addons-e2e",
		"front", frontPort, "notes", notesPort)
	applied := time.Now()
	inst := e.waitServing(1)[0].Metadata.Name
	kubectl := func(args ...string) (string, error) {
		return e.herdStdout(append([]string{"kubectl", inst, "--"}, args...)...)
	}

	// Cluster DNS: front relays what back answers at http://back/.
	var relayed struct{ Pod, Revision string }
	e.waitFor(30*time.Second, 250*time.Millisecond, func() string {
		body, err := getBody(fmt.Sprintf("http://127.0.0.1:%d/upstream", frontPort))
		if err != nil {
			return "GET front /upstream: " + err.Error()
		}
		if err := json.Unmarshal(body, &relayed); err != nil {
			return fmt.Sprintf("GET front /upstream: %v: %s", err, body)
		}
		return ""
	})
	if relayed.Revision != "back" || !strings.HasPrefix(relayed.Pod, "back-") {
		t.Errorf("front relayed pod %q revision %q, want back's", relayed.Pod, relayed.Revision)
	}

	// Storage: the claim is bound by the default class, the pod wrote and read its line, and the
	// file is in the instance's own directory.
	notesPod := func() string {
		out, err := kubectl("get", "pods", "-l", "app=notes", "--field-selector=status.phase=Running", "-o", "jsonpath={.items[*].metadata.name}")
		if err != nil {
			return ""
		}
		return strings.TrimSpace(out)
	}
	first := notesPod()
	if first == "" || strings.Contains(first, " ") {
		t.Fatalf("want one running notes pod, got %q", first)
	}
	if out, err := kubectl("get", "pvc", "notes", "-o", "jsonpath={.status.phase} {.spec.storageClassName}"); err != nil || strings.TrimSpace(out) != "Bound local-path" {
		t.Errorf("PVC notes: %q (%v), want Bound local-path", out, err)
	}
	e.waitFor(30*time.Second, 250*time.Millisecond, func() string { return notesSay(notesPort, "written by "+first+"\n") })
	files, _ := filepath.Glob(filepath.Join(e.data, "providers", "local", "instances", inst, "agent", "kubelet",
		strings.TrimPrefix(addons.StorageDir, "/var/lib/kubelet/"), "*", "notes.log"))
	if len(files) != 1 {
		t.Fatalf("the volume's notes.log is not in the instance's directory (found %v)", files)
	}
	if data, err := os.ReadFile(files[0]); err != nil || !strings.Contains(string(data), first) {
		t.Errorf("%s: %q (%v), want the line of %s", files[0], data, err, first)
	}
	// A new pod on the same claim reads what the first one wrote.
	if out, err := kubectl("delete", "pod", first, "--wait=false"); err != nil {
		t.Fatalf("delete pod %s: %v\n%s", first, err, out)
	}
	e.waitFor(60*time.Second, 500*time.Millisecond, func() string {
		second := notesPod()
		if second == "" || second == first {
			return "no new notes pod running yet"
		}
		return notesSay(notesPort, "written by "+first+"\nwritten by "+second+"\n")
	})

	// Resource metrics: kubectl top answers inside the instance, and the HPA reads back's CPU.
	var top string
	e.waitFor(90*time.Second, time.Second, func() string {
		out, err := kubectl("top", "pods", "-A")
		top = out
		if err != nil || !strings.Contains(out, "notes-") || !strings.Contains(out, "back-") {
			return fmt.Sprintf("kubectl top pods -A: %v\n%s", err, out)
		}
		return ""
	})
	t.Logf("kubectl top pods -A, %.1f s after the fleet was applied:\n%s", time.Since(applied).Seconds(), top)
	if strings.Contains(top, "metrics-server") {
		t.Errorf("a metrics-server pod runs: the node's kube-combined process should serve resource metrics\n%s", top)
	}
	e.waitFor(30*time.Second, time.Second, func() string {
		out, err := kubectl("top", "node", "--no-headers")
		if err != nil || !strings.HasPrefix(strings.TrimSpace(out), inst+" ") {
			return fmt.Sprintf("kubectl top node: %v\n%s", err, out)
		}
		return ""
	})
	e.waitFor(90*time.Second, time.Second, func() string {
		out, err := kubectl("get", "hpa", "back", "-o", "jsonpath={.status.currentMetrics[0].resource.current.averageUtilization}")
		if err != nil || strings.TrimSpace(out) == "" {
			return fmt.Sprintf("the HPA has no CPU reading yet: %v %s", err, out)
		}
		return ""
	})

	// The volume goes with its claim: the agent removes its directory, then the volume.
	volume, err := kubectl("get", "pvc", "notes", "-o", "jsonpath={.spec.volumeName}")
	if err != nil || strings.TrimSpace(volume) == "" {
		t.Fatalf("PVC notes' volume: %q (%v)", volume, err)
	}
	for _, args := range [][]string{{"delete", "deployment", "notes"}, {"delete", "pvc", "notes", "--wait=false"}} {
		if out, err := kubectl(args...); err != nil {
			t.Fatalf("kubectl %v: %v\n%s", args, err, out)
		}
	}
	e.waitFor(60*time.Second, 500*time.Millisecond, func() string {
		if _, err := os.Stat(filepath.Dir(files[0])); !os.IsNotExist(err) {
			return "the volume's directory is still there: " + filepath.Dir(files[0])
		}
		if out, err := kubectl("get", "pv", "-o", "jsonpath={.items[*].metadata.name}"); err != nil || strings.Contains(out, strings.TrimSpace(volume)) {
			return fmt.Sprintf("volume %s not deleted yet: %q (%v)", volume, out, err)
		}
		return ""
	})
}

// notesSay returns "" when the notes app answers exactly want through the load balancer.
func notesSay(port int, want string) string {
	body, err := getBody(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		return "GET notes: " + err.Error()
	}
	if string(body) != want {
		return fmt.Sprintf("GET notes: %q, want %q", body, want)
	}
	return ""
}

// getBody GETs url and returns the body of a 200 answer.
func getBody(url string) ([]byte, error) {
	resp, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return body, nil
}

// startTwoListenerFleet starts herd up and applies a fleet of one instance of the node image named
// image (built by newEnv's steps) with two HTTP listeners on ports port1 and port2 for the
// instance's NodePorts 30080 and 30081, health-checked on 30080. Everything is cleaned up and
// checked for leftovers at the end of the test.
func (e *env) startTwoListenerFleet(fleet, image, name1 string, port1 int, name2 string, port2 int) {
	e.t.Helper()
	before := localtest.Take(e.t)
	localtest.CleanupOnInterrupt(e.t, func() { e.cleanup(before) })
	e.startUp()
	e.applyFleet(fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: %s
  replicas: {min: 1, max: 1, desired: 1}
  listeners:
  - {name: %s, port: %d, instancePort: 30080, protocol: http}
  - {name: %s, port: %d, instancePort: 30081, protocol: http}
  healthCheck: {path: /healthz, port: 30080, interval: 250ms, timeout: 200ms}
  regions: [{name: local, provider: local}]
`, fleet, image, name1, port1, name2, port2))
}
