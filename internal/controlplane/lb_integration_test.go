package controlplane_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/freeport"
)

// loopbackBackends serves HTTP on 127.1.0.1 to 127.1.0.n, port port: the addresses the fake
// provider gives the first instances of a fresh data dir, so these servers stand in for the
// instances' workloads. handle gets the address of the backend that answers.
func loopbackBackends(t *testing.T, n, port int, handle func(addr string, w http.ResponseWriter, r *http.Request)) {
	for i := 1; i <= n; i++ {
		addr := net.JoinHostPort(fmt.Sprintf("127.1.0.%d", i), strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Skipf("cannot listen on %s (loopback range not routable here): %v", addr, err)
		}
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { handle(addr, w, r) })}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
}

// loopbackFleet starts herd up with the fake provider, n loopback backends answering with handle
// (or "hello from <addr>" when nil) and applies fleet "web" with one listener to them and a fast
// health check; spec holds the fleet's other spec lines, indented two spaces. It returns the
// cluster and the load balancer's port.
func loopbackFleet(t *testing.T, n int, handle func(addr string, w http.ResponseWriter, r *http.Request), spec string) (*cluster, int) {
	t.Helper()
	manifest, lbPort := loopbackManifest(t, n, handle, spec)
	c := newCluster(t)
	c.up()
	c.apply(manifest)
	return c, lbPort
}

// loopbackManifest starts n loopback backends answering with handle and returns the manifest of
// fleet "web" on them, as loopbackFleet applies it, and its load balancer port.
func loopbackManifest(t *testing.T, n int, handle func(addr string, w http.ResponseWriter, r *http.Request), spec string) (string, int) {
	if handle == nil {
		handle = func(addr string, w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s\n", addr) }
	}
	instancePort, lbPort := freeport.TCP(t), freeport.TCP(t)
	loopbackBackends(t, n, instancePort, handle)
	return fmt.Sprintf(`apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: web}
spec:
  image: hello
  listeners: [{port: %d, instancePort: %d}]
  healthCheck: {path: /healthz, interval: 200ms, timeout: 100ms, healthyThreshold: 1}
%s`, lbPort, instancePort, spec), lbPort
}

// getHello sends GET url with client and fails unless a loopback backend answered it as
// loopbackFleet's default handler does.
func getHello(client *http.Client, url string) error {
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(string(body), "hello from 127.1.0.") {
		return fmt.Errorf("%d %q", resp.StatusCode, body)
	}
	return nil
}

// TestIntegrationLoadBalancerServesFleet runs herd up with the fake provider, whose instances get
// the loopback addresses 127.1.0.1, .2, .3 in a fresh data dir; real HTTP servers stand in for the
// instances' workloads on those addresses. It checks that herd's load balancer sends real requests
// to every instance, that `herd get instances` shows the load balancer's view, and that scaling in
// drains an instance without failing a request.
func TestIntegrationLoadBalancerServesFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	var served sync.Map // backend address -> count
	c, lbPort := loopbackFleet(t, 3, func(addr string, w http.ResponseWriter, r *http.Request) {
		n, _ := served.LoadOrStore(addr, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		fmt.Fprintf(w, "hello from %s\n", addr)
	}, `  replicas: {min: 1, max: 5, desired: 3}
  regions: [{name: local, options: {bootDelay: 100ms}}]
`)
	c.waitFor(15*time.Second, func() string {
		healthy := 0
		for _, in := range c.instances() {
			if in.Status.LBHealth == "healthy" {
				healthy++
			}
		}
		if healthy != 3 {
			return fmt.Sprintf("%d instances healthy in the load balancer, want 3", healthy)
		}
		return ""
	})

	url := fmt.Sprintf("http://127.0.0.1:%d/", lbPort)
	get := func() error { return getHello(http.DefaultClient, url) }
	for range 60 {
		if err := get(); err != nil {
			t.Fatalf("request through the load balancer: %v", err)
		}
	}
	n := 0
	served.Range(func(_, _ any) bool { n++; return true })
	if n != 3 {
		t.Fatalf("requests reached %d backends, want all 3", n)
	}

	// Scale in under load: every request must still succeed.
	stop := make(chan struct{})
	var failures atomic.Int64
	var total atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			total.Add(1)
			if err := get(); err != nil {
				failures.Add(1)
				t.Logf("request failed during scale-in: %v", err)
			}
		}
	})
	if out, err := c.herd("scale", "fleet", "web", "--replicas", "1"); err != nil {
		t.Fatalf("scale: %v %s", err, out)
	}
	c.waitFor(15*time.Second, func() string {
		if n := len(c.instances()); n != 1 {
			return fmt.Sprintf("%d instances, want 1", n)
		}
		return ""
	})
	close(stop)
	wg.Wait()
	if failures.Load() != 0 {
		t.Fatalf("%d of %d requests failed while scaling in", failures.Load(), total.Load())
	}
	out, _ := c.herd("get", "instances", "-o", "json")
	var insts []v1alpha1.Instance
	_ = json.Unmarshal([]byte(out), &insts)
	if len(insts) != 1 || insts[0].Status.LBHealth != "healthy" {
		t.Fatalf("after scale-in: %s", out)
	}
	t.Logf("%d requests during scale-in, none failed", total.Load())
}
