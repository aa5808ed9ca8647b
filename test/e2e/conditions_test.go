package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"herd.dev/herd/api/v1alpha1"
)

// fleetYAML is a fleet of examples/hello with desired instances and one listener on port.
func fleetYAML(name string, desired, port int) []byte {
	return fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: hello
  replicas: {min: 0, max: 5, desired: %d}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms}
  regions: [{name: local, provider: local}]
`, name, desired, port, helloPort, helloPort)
}

// applyFile writes yaml to a file of its own and runs herd apply on it, returning its output.
func (e *env) applyFile(name string, yaml []byte) (string, error) {
	file := filepath.Join(e.dir, name+".yaml")
	if err := os.WriteFile(file, yaml, 0o600); err != nil {
		e.t.Fatal(err)
	}
	return e.herd("apply", "-f", file)
}

// wantConditions fails unless the fleet's conditions have the given statuses (type -> status,
// or "status/reason").
func (e *env) wantConditions(name string, want map[string]string) {
	e.t.Helper()
	f := e.fleet(name)
	if f == nil {
		e.t.Fatalf("herd get fleet %s failed", name)
	}
	for typ, w := range want {
		c := meta.FindStatusCondition(f.Status.Conditions, typ)
		if c == nil {
			e.t.Errorf("fleet %s has no %s condition: %+v", name, typ, f.Status.Conditions)
			continue
		}
		got := string(c.Status)
		if strings.Contains(w, "/") {
			got += "/" + c.Reason
		}
		if got != w {
			e.t.Errorf("fleet %s: %s is %s (%s: %s), want %s", name, typ, got, c.Reason, c.Message, w)
		}
	}
}

// TestIntegrationConditionsAndWait runs a fleet of real instances and checks that its conditions
// tell the truth as `herd wait` and `herd describe` see them: Ready once it serves, a listener
// clash refused at apply with the other fleet's name, and a port taken on the host shown as
// LoadBalancerReady=False until it is free.
func TestIntegrationConditionsAndWait(t *testing.T) {
	e := startHelloEnv(t)
	if out, err := e.applyFile("cond", fleetYAML("cond", 1, e.lbPort)); err != nil {
		t.Fatalf("herd apply: %v\n%s", err, out)
	}
	if out, err := e.herd("wait", "fleet/cond", "--for", "condition=Ready", "--timeout", bootLimit.String()); err != nil {
		t.Fatalf("herd wait fleet/cond --for condition=Ready: %v\n%s", err, out)
	}
	e.wantConditions("cond", map[string]string{
		v1alpha1.ConditionReady:             string(metav1.ConditionTrue),
		v1alpha1.ConditionAvailable:         string(metav1.ConditionTrue),
		v1alpha1.ConditionLoadBalancerReady: string(metav1.ConditionTrue),
		v1alpha1.ConditionProgressing:       string(metav1.ConditionFalse),
		v1alpha1.ConditionDegraded:          string(metav1.ConditionFalse),
	})
	if out, err := e.herd("describe", "fleet", "cond"); err != nil || !strings.Contains(out, "LoadBalancerReady") {
		t.Errorf("herd describe fleet cond shows no conditions: %v\n%s", err, out)
	}
	if out, err := e.herd("get", "instances", "-o", "wide"); err == nil {
		t.Logf("serving:\n%s", out)
	}

	// A second fleet on the same port is refused at apply, and nothing of it is stored.
	out, err := e.applyFile("clash", fleetYAML("clash", 0, e.lbPort))
	if err == nil || !strings.Contains(out, `"cond"`) {
		t.Errorf("apply of a fleet on fleet cond's port: err %v, want a refusal naming fleet \"cond\":\n%s", err, out)
	}
	if e.fleet("clash") != nil {
		t.Errorf("fleet clash stored although its apply was refused")
	}

	// A port some other program holds on the host can only be found when the load balancer binds it.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	if out, err := e.applyFile("busy", fleetYAML("busy", 0, port)); err != nil {
		t.Fatalf("herd apply busy: %v\n%s", err, out)
	}
	if out, err := e.herd("wait", "fleet/busy", "--for", "condition=LoadBalancerReady=False", "--timeout", "30s"); err != nil {
		t.Fatalf("herd wait fleet/busy --for condition=LoadBalancerReady=False: %v\n%s", err, out)
	}
	e.wantConditions("busy", map[string]string{
		v1alpha1.ConditionLoadBalancerReady: "False/ListenerRefused",
		v1alpha1.ConditionReady:             string(metav1.ConditionFalse),
		v1alpha1.ConditionDegraded:          string(metav1.ConditionTrue),
	})
	taken.Close()
	if out, err := e.herd("wait", "fleet/busy", "--for", "condition=LoadBalancerReady", "--for", "condition=Ready", "--timeout", "60s"); err != nil {
		t.Fatalf("fleet busy once its port is free: %v\n%s", err, out)
	}
	if out, err := e.herd("delete", "fleet", "busy"); err != nil {
		t.Fatalf("herd delete fleet busy: %v\n%s", err, out)
	}
	if out, err := e.herd("wait", "fleet/busy", "--for", "delete", "--timeout", "60s"); err != nil {
		t.Fatalf("herd wait fleet/busy --for delete: %v\n%s", err, out)
	}
}

// TestIntegrationReadyServes applies a fleet of three real instances and checks that the moment
// `herd wait --for condition=Ready` returns, the fleet serves as Ready says: every request sent
// through the load balancer then is answered, every instance answers some (the hello app names
// its instance), and herd get counts the three as ready. Then an edge in front of the fleet, over
// TLS (checkEdgeTLS).
func TestIntegrationReadyServes(t *testing.T) {
	const n, requests = 3, 30
	e := startHelloEnv(t)
	if out, err := e.applyFile("serve", fleetYAML("serve", n, e.lbPort)); err != nil {
		t.Fatalf("herd apply: %v\n%s", err, out)
	}
	if out, err := e.herd("wait", "fleet/serve", "--for", "condition=Ready", "--timeout", bootLimit.String()); err != nil {
		t.Fatalf("herd wait fleet/serve --for condition=Ready: %v\n%s", err, out)
	}
	// No retries and no waiting from here: the load balancer picks targets in turn among those it
	// finds healthy, so a Ready instance it does not send traffic to answers none of these.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	url := fmt.Sprintf("http://127.0.0.1:%d/", e.lbPort)
	answered := map[string]int{}
	var failed []string
	for range requests {
		r := get(client, url)
		if r.err != nil {
			failed = append(failed, r.err.Error())
			continue
		}
		answered[r.instance]++
	}
	t.Logf("right after herd wait: %d requests through the load balancer, %d failed, answers per instance %v", requests, len(failed), answered)
	if len(failed) > 0 {
		t.Errorf("%d of %d requests through the load balancer failed right after herd wait said Ready: %v", len(failed), requests, failed)
	}
	ins := e.instances()
	for _, in := range ins {
		if answered[in.Metadata.Name] == 0 {
			t.Errorf("instance %s (%s, load balancer: %s) answered none of %d requests right after herd wait said Ready", in.Metadata.Name, in.Status.Phase, in.Status.LBHealth, requests)
		}
	}
	if len(ins) != n || len(answered) != n {
		t.Errorf("%d instances, %d of them answered; want %d and %d", len(ins), len(answered), n, n)
	}
	if f := e.fleet("serve"); f == nil || f.Status.ReadyReplicas != n {
		t.Errorf("herd get fleet serve: %+v, want %d ready", f, n)
	}
	e.checkEdgeTLS("serve")
}
