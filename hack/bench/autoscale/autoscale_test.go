package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/provider/local/localtest"
)

const (
	helloPort = 30080
	fleetName = "autoscale"
	target    = 25 // requests per second per instance
	baseRate  = 22 // about 1x the target
	stepRate  = 4 * target
	bootLimit = 4 * time.Minute
)

// bench is one herd up with the local provider on a data directory of its own.
type bench struct {
	t       *testing.T
	root    string
	dir     string
	data    string
	bin     string
	up      *exec.Cmd
	upDone  chan struct{}
	upLog   string
	lbPort  int
	mu      sync.Mutex
	created map[string]bool // every instance name seen
}

func (b *bench) herd(args ...string) (string, error) {
	cmd := exec.Command(b.bin, args...)
	cmd.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(b.dir, "config"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// waitFor polls cond every interval until it returns "" or timeout passes.
func (b *bench) waitFor(timeout, every time.Duration, cond func() string) {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("after %s: %s", timeout, msg)
		}
		select {
		case <-time.After(every):
		case <-b.upDone:
			log, _ := os.ReadFile(b.upLog)
			b.t.Fatalf("herd up exited while waiting (%s):\n%s", msg, tail(string(log), 40))
		}
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func (b *bench) instances() []v1alpha1.Instance {
	out, err := b.herd("get", "instances", "-o", "json")
	if err != nil {
		return nil
	}
	var ins []v1alpha1.Instance
	if json.Unmarshal([]byte(out), &ins) != nil {
		return nil
	}
	b.mu.Lock()
	for _, in := range ins {
		b.created[in.Metadata.Name] = true
	}
	b.mu.Unlock()
	return ins
}

func (b *bench) desired() int32 {
	out, err := b.herd("get", "fleets", fleetName, "-o", "json")
	if err != nil {
		return -1
	}
	var f v1alpha1.Fleet
	if json.Unmarshal([]byte(out), &f) != nil || f.Spec.Replicas.Desired == nil {
		var list []v1alpha1.Fleet
		if json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].Spec.Replicas.Desired == nil {
			return -1
		}
		f = list[0]
	}
	return *f.Spec.Replicas.Desired
}

func (b *bench) apply(max, warmPool int) {
	b.t.Helper()
	fleet := filepath.Join(b.dir, "fleet.yaml")
	if err := os.WriteFile(fleet, fmt.Appendf(nil, `apiVersion: herd.dev/v1alpha1
kind: Fleet
metadata: {name: %s}
spec:
  image: hello
  replicas: {min: 1, max: %d, desired: 1}
  listeners: [{name: http, port: %d, instancePort: %d, protocol: http}]
  healthCheck: {path: /healthz, port: %d, interval: 250ms, timeout: 200ms, unhealthyThreshold: 2, healthyThreshold: 1}
  autoscaling: {metric: requestsPerSecond, target: %d, scaleInStabilization: 300s, warmPool: %d}
  regions: [{name: local, provider: local}]
`, fleetName, max, b.lbPort, helloPort, helloPort, target, warmPool), 0o600); err != nil {
		b.t.Fatal(err)
	}
	if out, err := b.herd("apply", "-f", fleet); err != nil {
		b.t.Fatalf("herd apply: %v\n%s", err, out)
	}
}

// settle waits for one serving instance healthy in the load balancer and warm Ready warm ones,
// and returns the serving and warm instance names.
func (b *bench) settle(warm int) (serving, warmNames []string) {
	b.t.Helper()
	b.waitFor(bootLimit, 500*time.Millisecond, func() string {
		serving, warmNames = nil, nil
		var states []string
		for _, in := range b.instances() {
			states = append(states, fmt.Sprintf("%s %s/%s", in.Metadata.Name, in.Status.Phase, in.Status.LBHealth))
			switch {
			case controller.IsWarm(&in) && in.Status.Phase == v1alpha1.PhaseReady:
				warmNames = append(warmNames, in.Metadata.Name)
			case !controller.IsWarm(&in) && in.Status.Phase == v1alpha1.PhaseReady && in.Status.LBHealth == "healthy":
				serving = append(serving, in.Metadata.Name)
			}
		}
		if len(serving) != 1 || len(warmNames) != warm {
			return fmt.Sprintf("want 1 serving and %d warm instances Ready, have: %s", warm, strings.Join(states, ", "))
		}
		return ""
	})
	return serving, warmNames
}

// deleteFleet deletes the fleet and waits until no instance is left.
func (b *bench) deleteFleet() {
	b.t.Helper()
	if out, err := b.herd("delete", "fleet", fleetName); err != nil {
		b.t.Fatalf("delete fleet: %v %s", err, out)
	}
	b.waitFor(2*time.Minute, 250*time.Millisecond, func() string {
		if ins := b.instances(); ins == nil || len(ins) > 0 {
			return fmt.Sprintf("%d instances left after deleting the fleet", len(ins))
		}
		return ""
	})
}

// load sends rate requests per second through the load balancer and records which instance
// answered each, and when.
type load struct {
	url    string
	client *http.Client
	mu     sync.Mutex
	rate   int
	firsts map[string]time.Time // instance -> first answer
	failed int
	stop   chan struct{}
	wg     sync.WaitGroup
}

func startLoad(url string, rate int) *load {
	l := &load{url: url, rate: rate, firsts: map[string]time.Time{}, stop: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	l.wg.Go(func() {
		next := time.Now()
		for {
			l.mu.Lock()
			every := time.Second / time.Duration(l.rate)
			l.mu.Unlock()
			next = next.Add(every)
			select {
			case <-l.stop:
				return
			case <-time.After(time.Until(next)):
			}
			l.wg.Go(l.one)
		}
	})
	return l
}

func (l *load) one() {
	resp, err := l.client.Get(l.url)
	if err != nil {
		l.mu.Lock()
		l.failed++
		l.mu.Unlock()
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var reply struct {
		Instance string `json:"instance"`
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &reply) != nil || reply.Instance == "" {
		l.failed++
		return
	}
	if _, ok := l.firsts[reply.Instance]; !ok {
		l.firsts[reply.Instance] = time.Now()
	}
}

func (l *load) setRate(r int) {
	l.mu.Lock()
	l.rate = r
	l.mu.Unlock()
}

// firstOther returns which instance not in known answered first, and when, if one did.
func (l *load) firstOther(known []string) (string, time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	var firstName string
	for name, at := range l.firsts {
		isKnown := false
		for _, k := range known {
			isKnown = isKnown || k == name
		}
		if !isKnown && (first.IsZero() || at.Before(first)) {
			first, firstName = at, name
		}
	}
	return firstName, first, !first.IsZero()
}

func (l *load) finish() int {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.wg.Wait()
	l.client.CloseIdleConnections()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// step runs about 1x the target for a few seconds, then 4x, and returns the time from the step to
// desired raised and to an instance outside known answering through the load balancer, and that
// instance. Desired is polled through the CLI (each poll takes tens of milliseconds), so decision
// may come out later than serving when a warm instance is registered at once.
func (b *bench) step(known []string) (decision, serving time.Duration, newcomer string) {
	b.t.Helper()
	url := fmt.Sprintf("http://127.0.0.1:%d/", b.lbPort)
	l := startLoad(url, baseRate)
	defer func() {
		if failed := l.finish(); failed > 0 {
			b.t.Logf("%d requests failed during the load step", failed)
		}
	}()
	// About 1x: the fleet stays at one instance.
	b.waitFor(10*time.Second, 200*time.Millisecond, func() string {
		if _, _, seen := l.firstOther(nil); !seen {
			return "no answer yet at 1x"
		}
		return ""
	})
	settleUntil := time.Now().Add(3 * time.Second)
	b.waitFor(5*time.Second, 200*time.Millisecond, func() string {
		if d := b.desired(); d != 1 {
			b.t.Fatalf("desired %d at about 1x the target, want 1", d)
		}
		if time.Now().Before(settleUntil) {
			return "steady at 1x"
		}
		return ""
	})
	start := time.Now()
	l.setRate(stepRate)
	b.waitFor(30*time.Second, 50*time.Millisecond, func() string {
		if d := b.desired(); d <= 1 {
			return fmt.Sprintf("desired %d after the step to 4x", d)
		}
		decision = time.Since(start)
		return ""
	})
	b.waitFor(bootLimit, 50*time.Millisecond, func() string {
		name, at, ok := l.firstOther(known)
		if !ok {
			return "no new instance answering through the load balancer"
		}
		serving, newcomer = at.Sub(start), name
		return ""
	})
	return decision, serving, newcomer
}

// cleanup deletes the fleet, stops herd up, removes whatever instance is left through the
// provider's data directory and checks that nothing is left on the host.
func (b *bench) cleanup(before localtest.Snapshot) {
	t := b.t
	if b.up != nil {
		select {
		case <-b.upDone:
		default:
			_, _ = b.herd("delete", "fleet", fleetName)
			deadline := time.Now().Add(2 * time.Minute)
			for time.Now().Before(deadline) {
				if ins := b.instances(); ins != nil && len(ins) == 0 {
					break
				}
				select {
				case <-time.After(250 * time.Millisecond):
				case <-b.upDone:
				}
			}
			_ = b.up.Process.Signal(syscall.SIGINT)
			select {
			case <-b.upDone:
			case <-time.After(time.Minute):
				t.Errorf("herd up did not stop within a minute of SIGINT; killing it")
				_ = b.up.Process.Kill()
				<-b.upDone
			}
		}
		if t.Failed() {
			log, _ := os.ReadFile(b.upLog)
			t.Logf("herd up log (tail):\n%s", tail(string(log), 60))
		}
	}
	p, err := local.New(local.Options{DataDir: b.data, HerdBinary: b.bin})
	if err != nil {
		t.Errorf("local provider for cleanup: %v", err)
		return
	}
	ctx := context.Background()
	if left, err := p.List(ctx, provider.ListOptions{}); err == nil {
		for _, in := range left {
			b.created[in.Name] = true
			t.Errorf("instance %s left after herd up stopped; deleting it", in.Name)
			if err := p.Delete(ctx, in.Name); err != nil {
				t.Errorf("delete %s: %v", in.Name, err)
			}
		}
	}
	o := localtest.Owned{Dirs: []string{b.data}, Links: []string{p.BridgeName("local")}}
	for n := range b.created {
		ns, veth, cg := local.HostNames(n)
		o.Netns = append(o.Netns, ns)
		o.Links = append(o.Links, veth)
		o.Cgroups = append(o.Cgroups, strings.TrimPrefix(cg, "/"))
		o.Gone = append(o.Gone, p.InstanceDir(n))
	}
	localtest.AssertClean(t, before, o)
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestIntegrationBenchAutoscale is make bench-autoscale's run (see main.go). At most three real
// instances exist at a time: 1 growing to 3 without a warm pool, then 1 serving and 1 warm growing
// to 2 serving and 1 warm.
func TestIntegrationBenchAutoscale(t *testing.T) {
	if os.Getenv(benchEnv) == "" {
		t.Skip("run with make bench-autoscale")
	}
	if os.Geteuid() != 0 {
		t.Skip("real instances need root (network namespaces, bridges, cgroups)")
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		t.Fatalf("go env GOMOD: %v", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(out)))
	// Short: containerd's sockets live under the data directory (unix socket paths are short).
	dir, err := os.MkdirTemp("", "ha-")
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{t: t, root: root, dir: dir, data: filepath.Join(dir, "d"), bin: filepath.Join(dir, "herd"),
		upLog: filepath.Join(dir, "up.log"), created: map[string]bool{}}
	t.Cleanup(func() { os.RemoveAll(dir) })
	build := exec.Command("go", "build", "-o", b.bin, "./cmd/herd")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/herd: %v\n%s", err, out)
	}
	if err := local.CheckHost(b.bin); err != nil {
		t.Skipf("real instances cannot run here (run make deps and make kubernetes): %v", err)
	}
	localtest.Exclusive(t)
	before := localtest.Take(t)
	t.Cleanup(func() { b.cleanup(before) })

	if out, err := b.herd("image", "build", "-f", filepath.Join(root, "examples", "hello", "image.yaml"), "--data-dir", b.data); err != nil {
		t.Fatalf("herd image build: %v\n%s", err, tail(out, 30))
	}
	logf, err := os.Create(b.upLog)
	if err != nil {
		t.Fatal(err)
	}
	b.up = exec.Command(b.bin, "up", "--provider", "local", "--data-dir", b.data,
		"--listen", "127.0.0.1:0", "--lb-address", "127.0.0.1")
	b.up.Env = append(os.Environ(), "HERD_CONFIG="+filepath.Join(dir, "config"))
	b.up.Stdout, b.up.Stderr = logf, logf
	if err := b.up.Start(); err != nil {
		t.Fatal(err)
	}
	b.upDone = make(chan struct{})
	go func() { _ = b.up.Wait(); logf.Close(); close(b.upDone) }()
	b.waitFor(30*time.Second, 100*time.Millisecond, func() string {
		if out, err := b.herd("get", "fleets"); err != nil {
			return "herd get fleets: " + strings.TrimSpace(out)
		}
		return ""
	})
	b.lbPort = freePort(t)

	// Without a warm pool: the new capacity is a booted instance.
	b.apply(3, 0)
	serving, _ := b.settle(0)
	decision, newCapacity, _ := b.step(serving)
	t.Logf("no warm pool: desired raised %.3fs and a new instance serving %.3fs after the step", decision.Seconds(), newCapacity.Seconds())
	b.deleteFleet()

	// With a warm pool of 1: the new capacity is the warm instance, registered.
	b.apply(2, 1)
	serving, warm := b.settle(1)
	warmDecision, warmServing, newcomer := b.step(serving)
	if !slices.Contains(warm, newcomer) {
		t.Errorf("the first new instance serving was %s, not the warm one (%v)", newcomer, warm)
	}
	t.Logf("warm pool 1: desired raised %.3fs and a new instance serving %.3fs after the step (warm: %v)", warmDecision.Seconds(), warmServing.Seconds(), warm)
	b.deleteFleet()

	t.Logf("autoscale: decision_s=%.3f new_capacity_serving_s=%.3f warm_pool_serving_s=%.3f", decision.Seconds(), newCapacity.Seconds(), warmServing.Seconds())
}
