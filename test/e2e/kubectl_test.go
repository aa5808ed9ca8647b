package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"herd.dev/herd/internal/freeport"
)

// helloAppPort is the hello app's container port (examples/hello/manifests/deployment.yaml).
const helloAppPort = 8080

// kubectlProtocol returns the environment that has kubectl upgrade to websockets (its default)
// or to SPDY, for the variables' prefix (REMOTE_COMMAND or PORT_FORWARD), and a name for it.
func kubectlProtocol(prefix string, websockets bool) ([]string, string) {
	if websockets {
		return nil, "websockets"
	}
	return []string{"KUBECTL_" + prefix + "_WEBSOCKETS=false"}, "SPDY"
}

// kubectlExec runs a command in the hello pod through herd up's kube proxy, which must pass the
// connection upgrade kubectl exec asks for (websockets, or SPDY as a fallback).
func (e *env) kubectlExec(inst, pod string, websockets bool) {
	t := e.t
	t.Helper()
	env, proto := kubectlProtocol("REMOTE_COMMAND", websockets)
	// The hello image has no shell; its binary prints "hello REVISION" with -version.
	out, err := e.herdStdoutEnv(env, "kubectl", inst, "--", "exec", "-n", "default", pod, "-c", "hello", "--", "/hello", "-version")
	if err != nil || strings.TrimSpace(out) != "hello v1" {
		t.Fatalf("herd kubectl %s -- exec %s -- /hello -version over %s: %v, want \"hello v1\":\n%s", inst, pod, proto, err, out)
	}
}

// kubectlPortForward forwards a local port to the hello pod through herd up's kube proxy and
// asks the app for its reply over it with a real HTTP client.
func (e *env) kubectlPortForward(inst, pod string, websockets bool) {
	t := e.t
	t.Helper()
	env, proto := kubectlProtocol("PORT_FORWARD", websockets)
	port := freeport.TCP(t)
	pf := e.startHerdEnv(env, "kubectl", inst, "--", "port-forward", "-n", "default", "pod/"+pod, fmt.Sprintf("%d:%d", port, helloAppPort))
	l := pf.waitLine(30*time.Second, "Forwarding from", func(l string) bool { return strings.Contains(l, "Forwarding from") })
	t.Logf("herd kubectl %s -- port-forward over %s: %s", inst, proto, l)

	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", port))
	if err != nil {
		t.Fatalf("GET / through herd kubectl port-forward over %s: %v; stderr: %s", proto, err, pf.stderrText())
	}
	defer resp.Body.Close()
	var reply struct{ Pod, Revision string }
	if err := json.NewDecoder(resp.Body).Decode(&reply); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET / through herd kubectl port-forward over %s: %s, %v", proto, resp.Status, err)
	}
	if reply.Pod != pod || reply.Revision != "v1" {
		t.Errorf("GET / through herd kubectl port-forward over %s answered pod %q revision %q, want %q v1", proto, reply.Pod, reply.Revision, pod)
	}
	_ = pf.stop() // kubectl ends on the interrupt with a non-zero status; that it ends is enough
}
