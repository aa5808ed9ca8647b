package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/apiserver"
)

const logsFleet = "logs"

// herdStdout runs herd and returns its standard output alone (warnings go to the test's log).
func (e *env) herdStdout(args ...string) (string, error) {
	return e.herdStdoutEnv(nil, args...)
}

// herdStdoutEnv is herdStdout with more environment variables.
func (e *env) herdStdoutEnv(env []string, args ...string) (string, error) {
	cmd := exec.Command(e.bin, args...)
	cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(e.dir, "config"))
	cmd.Env = append(cmd.Env, env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if stderr.Len() > 0 {
		e.t.Logf("herd %s: stderr: %s", strings.Join(args, " "), stderr.String())
	}
	return string(out), err
}

// TestIntegrationLogsAndKubectl reads the hello app's logs of every instance of a real fleet
// through herd up, as text prefixed by instance and as JSON lines, runs kubectl through herd
// up's proxy route (get, exec and port-forward, the last two upgrading the connection), follows
// the fleet's logs while it scales out, and follows one instance's log until its fleet is deleted.
func TestIntegrationLogsAndKubectl(t *testing.T) {
	e := startHelloEnv(t)
	e.applyFleet(fleetYAML(logsFleet, 2, e.lbPort))
	ready := e.waitServing(2)
	e.getThroughLB()

	// The hello app logs one line when it starts serving (examples/hello/app).
	const helloLine = "hello: serving on :8080"
	out, err := e.herdStdout("logs", "fleet/"+logsFleet)
	if err != nil {
		t.Fatalf("herd logs fleet/%s: %v\n%s", logsFleet, err, out)
	}
	for _, in := range ready {
		if !hasLine(out, in.Metadata.Name+" hello-", helloLine) {
			t.Errorf("herd logs fleet/%s has no line of %s prefixed by it:\n%s", logsFleet, in.Metadata.Name, out)
		}
	}

	out, err = e.herdStdout("logs", "fleet/"+logsFleet, "-o", "json")
	if err != nil {
		t.Fatalf("herd logs -o json: %v\n%s", err, out)
	}
	seen := map[string]bool{}
	pods := map[string]string{} // instance -> its hello pod
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var l apiserver.LogLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("-o json line %q: %v", line, err)
		}
		if l.Fleet != logsFleet || l.Region != "local" || l.Revision == "" || l.Namespace != "default" ||
			!strings.HasPrefix(l.Pod, "hello-") || l.Container != "hello" || l.Time.IsZero() {
			t.Errorf("-o json line lacks a field: %s", line)
		}
		if strings.Contains(l.Message, helloLine) {
			seen[l.Instance] = true
			pods[l.Instance] = l.Pod
		}
	}
	for _, in := range ready {
		if !seen[in.Metadata.Name] {
			t.Errorf("no -o json line of %s with %q:\n%s", in.Metadata.Name, helloLine, out)
		}
	}

	inst := ready[0].Metadata.Name
	out, err = e.herdStdout("logs", inst, "-c", "hello", "--tail", "1", "--since", "1h")
	if err != nil || strings.Count(out, "\n") != 1 {
		t.Errorf("herd logs %s -c hello --tail 1: %v, want one line:\n%s", inst, err, out)
	}

	start := time.Now()
	out, err = e.herd("kubectl", inst, "--", "get", "pods", "-A")
	t.Logf("herd kubectl %s -- get pods -A took %.2fs", inst, time.Since(start).Seconds())
	if err != nil || !hasLine(out, "default ", "hello-", "Running") {
		t.Fatalf("herd kubectl %s -- get pods -A: %v, want the hello pod Running:\n%s", inst, err, out)
	}
	out, err = e.herd("events", "--fleet", logsFleet)
	if err != nil || !hasLine(out, apiserver.EventKubeconfigIssued, "Instance/"+inst) {
		t.Errorf("herd events: %v, want %s on Instance/%s:\n%s", err, apiserver.EventKubeconfigIssued, inst, out)
	}
	// kubectl upgrades to websockets, or to SPDY where websockets are off or refused.
	for _, websockets := range []bool{true, false} {
		e.kubectlExec(inst, pods[inst], websockets)
		e.kubectlPortForward(inst, pods[inst], websockets)
	}

	e.followScaleOut(ready, helloLine)

	e.followUntilDeleted(inst)
	if log, _ := os.ReadFile(e.upLog); strings.Contains(string(log), "herdkube_") {
		t.Errorf("herd up logged a kube token")
	}
}

// followScaleOut follows the fleet's logs, scales it out by one instance, and wants the new
// instance's lines in the same follow.
func (e *env) followScaleOut(ready []v1alpha1.Instance, helloLine string) {
	t := e.t
	known := map[string]bool{}
	for _, in := range ready {
		known[in.Metadata.Name] = true
	}
	f := e.startHerd("logs", "fleet/"+logsFleet, "-f")
	f.waitLine(30*time.Second, "a line of the fleet", func(l string) bool { return strings.Contains(l, helloLine) })
	replicas := strconv.Itoa(len(ready) + 1)
	if out, err := e.herd("scale", "fleet", logsFleet, "--replicas", replicas); err != nil {
		t.Fatalf("herd scale fleet %s --replicas %s: %v\n%s", logsFleet, replicas, err, out)
	}
	l := f.waitLine(3*time.Minute, "a line of the new instance", func(l string) bool {
		name, _, _ := strings.Cut(l, " ")
		return name != "" && !known[name] && strings.Contains(l, helloLine)
	})
	t.Logf("herd logs fleet/%s -f after scaling to %s: %s", logsFleet, replicas, l)
	_ = f.stop()
}

// followUntilDeleted follows one instance's log, deletes the fleet, and wants the follow to end
// cleanly (exit 0) once the instance is gone.
func (e *env) followUntilDeleted(inst string) {
	t := e.t
	f := e.startHerd("logs", inst, "-f")
	l := f.waitLine(30*time.Second, "a line", func(string) bool { return true })
	t.Logf("following %s: %s", inst, l)
	if out, err := e.herd("delete", "fleet", logsFleet); err != nil {
		t.Fatalf("delete fleet: %v %s", err, out)
	}
	select {
	case <-f.exited:
		if f.err != nil {
			t.Errorf("herd logs -f after the instance's deletion: %v, want exit 0; stderr: %s", f.err, f.stderrText())
		}
	case <-time.After(2 * time.Minute):
		_ = f.stop()
		t.Fatalf("herd logs %s -f still runs 2 minutes after its fleet's deletion; stderr: %s", inst, f.stderrText())
	}
	e.waitFor(2*time.Minute, 250*time.Millisecond, func() string {
		if ins := e.instances(); ins == nil || len(ins) > 0 {
			return fmt.Sprintf("%d instances left after deleting the fleet", len(ins))
		}
		return ""
	})
}

// hasLine reports whether a line of out holds every part, in order.
func hasLine(out string, parts ...string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		rest, ok := line, true
		for _, p := range parts {
			i := strings.Index(rest, p)
			if i < 0 {
				ok = false
				break
			}
			rest = rest[i+len(p):]
		}
		if ok {
			return true
		}
	}
	return false
}
