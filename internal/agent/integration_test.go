package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"herd.dev/herd/internal/agent/cgroups"
	"herd.dev/herd/internal/agent/proc"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/agentmetrics"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/kubebin"
	"herd.dev/herd/internal/provider/local/localtest"
)

// The integration tests boot real instances: they need root, `make deps` and `make kubernetes`.
// Each makes its own bridge, network namespace, veth and cgroup root, named after the test
// process, and removes them (and everything else it made) when it ends, failed or not.

// requireIntegration skips the test unless it can boot a real instance. The test then builds what
// it boots and calls exclusive before booting: the builds need no exclusive access.
func requireIntegration(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("boots a real instance; skipped under -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("boots a real instance: needs root")
	}
	for _, c := range kubebin.Components {
		if _, err := kubebin.Path(c); err != nil {
			t.Skipf("%v (run make kubernetes)", err)
		}
	}
	for _, bin := range []string{"containerd", "ctr", "etcd", "runc", "iptables", "nft", "ip", "nsenter", "go"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not found on PATH (run make deps)", bin)
		}
	}
}

// exclusive makes the test the only one booting real instances on this machine.
func exclusive(t *testing.T) {
	t.Helper()
	localtest.Exclusive(t)
	// The kubelet sets host kernel settings; the local provider restores them after its last
	// instance, and these tests run the agent without it.
	localtest.KeepKernelSettings(t)
}

var instanceSeq atomic.Int32

// testInstance is one instance booted as the local provider does it.
type testInstance struct {
	name, netns, hostVeth, bridge, cgroupRoot string
	ip                                        netip.Addr
	dir, stateDir, logPath                    string
	cmd                                       *exec.Cmd
	exited                                    chan struct{}
	exitErr                                   error
	started                                   time.Time
}

// buildAgent builds the herd-agent binary into dir.
func buildAgent(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "herd-agent")
	cmd := exec.Command("go", "build", "-o", bin, "herd.dev/herd/cmd/herd-agent")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build herd-agent: %v\n%s", err, out)
	}
	return bin
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// startInstance sets up a network namespace on a bridge of its own and starts herd-agent in it
// exactly as the local provider does (docs/local-instance.md). Everything is removed at cleanup.
func startInstance(t *testing.T, agentBin string, bundle image.Bundle, extraArgs ...string) *testInstance {
	t.Helper()
	pid := os.Getpid()
	n := instanceSeq.Add(1)
	subnet := pid%250 + 1
	in := &testInstance{
		name:       fmt.Sprintf("t%d-%d", pid, n),
		netns:      fmt.Sprintf("herdt-%d-%d", pid, n),
		hostVeth:   fmt.Sprintf("hv%d-%d", pid%10000000, n),
		bridge:     fmt.Sprintf("herdbr-t%d", pid%10000000),
		cgroupRoot: fmt.Sprintf("/herd-t%d-%d", pid, n),
		ip:         netip.MustParseAddr(fmt.Sprintf("10.219.%d.%d", subnet, 10+n%200)),
		exited:     make(chan struct{}),
	}
	gw := fmt.Sprintf("10.219.%d.1", subnet)
	in.dir = filepath.Join(t.TempDir(), "instances", in.name)
	in.stateDir = filepath.Join(in.dir, "agent")
	in.logPath = filepath.Join(in.dir, "agent.log")
	if err := os.MkdirAll(in.dir, 0o700); err != nil {
		t.Fatal(err)
	}

	// Cleanups run last-registered first: the agent, then the cgroups, then the network.
	localtest.CleanupOnInterrupt(t, func() {
		_ = exec.Command("ip", "netns", "delete", in.netns).Run()
		_ = exec.Command("ip", "link", "delete", in.hostVeth).Run()
		_ = exec.Command("ip", "link", "delete", in.bridge).Run()
	})
	sh(t, "ip", "link", "add", in.bridge, "type", "bridge")
	sh(t, "ip", "addr", "add", gw+"/24", "dev", in.bridge)
	sh(t, "ip", "link", "set", in.bridge, "up")
	sh(t, "ip", "netns", "add", in.netns)
	sh(t, "ip", "link", "add", in.hostVeth, "type", "veth", "peer", "name", "eth0", "netns", in.netns)
	sh(t, "ip", "link", "set", in.hostVeth, "master", in.bridge, "up")
	sh(t, "ip", "-n", in.netns, "addr", "add", in.ip.String()+"/24", "dev", "eth0")
	sh(t, "ip", "-n", in.netns, "link", "set", "eth0", "up")
	sh(t, "ip", "-n", in.netns, "link", "set", "lo", "up")
	sh(t, "ip", "-n", in.netns, "route", "add", "default", "via", gw)
	sh(t, "nsenter", "--net=/run/netns/"+in.netns, "sh", "-c", "echo 1 > /proc/sys/net/ipv4/ip_forward")

	localtest.CleanupOnInterrupt(t, func() {
		hs, err := cgroups.Hierarchies()
		if err != nil {
			t.Errorf("cleanup: %v", err)
			return
		}
		if left := cgroups.KillAll(hs, in.cgroupRoot, nil, 10*time.Second); left > 0 {
			t.Errorf("cleanup: %d processes survive in %s", left, in.cgroupRoot)
		}
		if err := cgroups.Remove(hs, in.cgroupRoot, nil); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})

	logf, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	credFile := filepath.Join(in.dir, "credential")
	if err := agentauth.WriteCredentialFile(credFile, testCredential); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--net=/run/netns/" + in.netns, "--", agentBin,
		"--name", in.name, "--bundle", bundle.Dir, "--state-dir", in.stateDir,
		"--address", in.ip.String(), "--cgroup-root", in.cgroupRoot, "--credential-file", credFile}, extraArgs...)
	in.cmd = exec.Command("nsenter", args...)
	in.cmd.Stdout, in.cmd.Stderr = logf, logf
	in.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWNS}
	in.started = time.Now()
	if err := in.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		in.exitErr = in.cmd.Wait()
		close(in.exited)
	}()
	localtest.CleanupOnInterrupt(t, func() {
		select {
		case <-in.exited:
		default:
			_ = in.cmd.Process.Kill()
			<-in.exited
		}
		if t.Failed() {
			t.Logf("agent.log (last lines):\n%s", proc.Tail(in.logPath, 40))
			// The components' logs (one kube-combined.log when they run in one process).
			logs, _ := filepath.Glob(filepath.Join(in.stateDir, "logs", "*.log"))
			for _, l := range logs {
				t.Logf("%s (last lines):\n%s", filepath.Base(l), proc.Tail(l, 30))
			}
		}
	})
	return in
}

// waitPhase waits until status.json says want. Another final phase, or the agent's exit before
// it, fails the test.
func (in *testInstance) waitPhase(t *testing.T, want Phase, timeout time.Duration) Status {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st, err := ReadStatus(filepath.Join(in.stateDir, StatusFile))
		if err == nil && st.Phase == want {
			return st
		}
		if err == nil && want != PhaseStopped && (st.Phase == PhaseFailed || st.Phase == PhaseStopped) {
			t.Fatalf("phase %s, want %s: %s", st.Phase, want, st.Reason)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no phase %s after %s (status %+v, err %v)", want, timeout, st, err)
		}
		select {
		case <-in.exited:
			if st, err := ReadStatus(filepath.Join(in.stateDir, StatusFile)); err == nil && st.Phase == want {
				return st
			}
			t.Fatalf("the agent exited (%v) before phase %s", in.exitErr, want)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitExit waits for the agent to exit and returns its exit code.
func (in *testInstance) waitExit(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-in.exited:
	case <-time.After(timeout):
		t.Fatalf("the agent did not exit within %s", timeout)
	}
	var ee *exec.ExitError
	switch {
	case in.exitErr == nil:
		return 0
	case errors.As(in.exitErr, &ee):
		return ee.ExitCode()
	}
	t.Fatalf("waiting for the agent: %v", in.exitErr)
	return -1
}

func httpGet(url string) (int, string, error) {
	return get(url, "")
}

// agentGet is a GET of the agent's port as herd up makes it: with the instance's credential, and
// checking that the answer proves the agent holds it too.
func agentGet(url string) (int, string, error) {
	return get(url, testCredential)
}

func get(url, credential string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	verify := func(*http.Response) error { return nil }
	if credential != "" {
		verify = agentauth.Authorize(req, credential)
	}
	resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if err := verify(resp); err != nil {
		return resp.StatusCode, "", err
	}
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// buildHello builds the herd binary and the examples/hello node image.
func buildHello(t *testing.T) (agentBin string, bundle image.Bundle) {
	t.Helper()
	tmp := t.TempDir()
	agentBin = buildAgent(t, tmp)
	bundle, err := image.Build(context.Background(), "../../examples/hello/image.yaml", image.NewStore(filepath.Join(tmp, "images")), nil)
	if err != nil {
		t.Fatal(err)
	}
	return agentBin, bundle
}

func TestIntegrationAgentBoots(t *testing.T) {
	requireIntegration(t)
	agentBin, bundle := buildHello(t)
	exclusive(t)

	in := startInstance(t, agentBin, bundle)
	st := in.waitPhase(t, PhaseReady, 2*time.Minute)
	var steps []string
	for _, s := range st.Steps {
		steps = append(steps, fmt.Sprintf("%s %.2fs", s.Name, s.Seconds))
	}
	t.Logf("boot steps: %s", strings.Join(steps, ", "))
	// The steps are a boot timeline: each process's start (the Kubernetes components may run in
	// one kube-combined process), the API server's and the node's readiness, and each workload's
	// availability (the hello deployment's, and its add-ons': cluster DNS, served by kube-combined,
	// is the kube-dns Service with a ready endpoint).
	for _, want := range []string{"containerd started", "etcd started", "kube-apiserver ready", "node Ready", "Deployment default/hello available", "Service kube-system/kube-dns available"} {
		if !slices.ContainsFunc(st.Steps, func(s Step) bool { return s.Name == want }) {
			t.Errorf("the boot steps lack %q", want)
		}
	}
	if st.StartedAt.IsZero() || st.StartedAt.After(time.Now()) {
		t.Errorf("startedAt = %v, want when the agent started", st.StartedAt)
	}

	// The app answers on the instance address, from the host.
	app := fmt.Sprintf("http://%s:30080/", in.ip)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body, err := httpGet(app)
		if err == nil && code == http.StatusOK {
			if !strings.Contains(body, `"instance":"`+in.name+`"`) {
				t.Errorf("the app answered %q, want it to name instance %s", body, in.name)
			}
			t.Logf("create -> app answering: %.2fs", time.Since(in.started).Seconds())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: %d %q %v", app, code, body, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The instance's packet rules: kube-proxy's are in its one nftables table, the IPv4 one
	// (KUBE_IPTABLES_IPV4_ONLY); the kubelet wrote no chains of its own (makeIPTablesUtilChains);
	// and the pods' traffic leaving the node is masqueraded by the agent's one rule, not by
	// the CNI bridge plugin's chain per pod.
	inNetns := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", in.netns}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s in the instance: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for _, save := range []string{"iptables-save", "ip6tables-save"} {
		if rules := inNetns(save); strings.Contains(rules, "KUBE-") {
			t.Errorf("%s in the instance shows Kubernetes' chains:\n%s", save, rules)
		}
	}
	if nat := inNetns("iptables", "-t", "nat", "-S"); strings.Count(nat, `--comment "herd: pod traffic leaving the node" -j MASQUERADE`) != 1 || strings.Contains(nat, "CNI-") {
		t.Errorf("the instance's NAT rules: want the agent's masquerade rule once, and no CNI chain:\n%s", nat)
	}
	if tables := inNetns("nft", "list", "tables"); !strings.Contains(tables, "table ip kube-proxy") || strings.Contains(tables, "ip6 kube-proxy") {
		t.Errorf("the instance's nftables tables: want kube-proxy's IPv4 table and no IPv6 one:\n%s", tables)
	}
	if kp := inNetns("nft", "list", "table", "ip", "kube-proxy"); !strings.Contains(kp, "default/hello") {
		t.Errorf("kube-proxy's table has no rule for the hello Service:\n%s", kp)
	}
	// The pod's lo is up with its address: containerd's CRI plugin sets it up (the CNI list has
	// no loopback plugin of its own). `ip addr show up` lists an interface only while it is up.
	if pid := procNamed(in.cgroupRoot, "hello"); pid == 0 {
		t.Errorf("no hello process in the instance's cgroups")
	} else if lo, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-n", "ip", "-o", "-4", "addr", "show", "dev", "lo", "up").CombinedOutput(); err != nil || !strings.Contains(string(lo), "127.0.0.1/8") {
		t.Errorf("the hello pod's lo: want it up with 127.0.0.1/8: %v\n%s", err, lo)
	}
	if mb, n := rssSumMB(in.cgroupRoot); n > 0 {
		t.Logf("RSS just after boot (not idle): %.0f MB over %d processes", mb, n)
	}

	agentURL := fmt.Sprintf("http://%s:%d", in.ip, DefaultPort)
	// Without the instance's credential the agent's port answers nothing but 401.
	for _, path := range []string{"/readyz", "/livez", "/metrics"} {
		if code, body, err := httpGet(agentURL + path); err != nil || code != http.StatusUnauthorized {
			t.Errorf("%s without the credential = %d %q %v, want 401", path, code, body, err)
		}
	}
	if code, body, err := agentGet(agentURL + "/readyz"); err != nil || code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Errorf("/readyz = %d %q %v", code, body, err)
	}
	if code, _, err := agentGet(agentURL + "/livez"); err != nil || code != http.StatusOK {
		t.Errorf("/livez = %d %v", code, err)
	}
	if code, body, err := agentGet(agentURL + "/metrics"); err != nil || code != http.StatusOK ||
		!strings.Contains(body, "herd_agent_ready 1") || !strings.Contains(body, `herd_pods{phase="Running"} 1`) /* hello alone: the node serves every add-on */ ||
		!strings.Contains(body, "herd_node_memory_working_set_bytes") ||
		!strings.Contains(body, `herd_agent_api_requests_total{resource="nodes",verb="get"}`) || !strings.Contains(body, "go_gc_duration_seconds") {
		t.Errorf("/metrics = %d %v:\n%s", code, err, body)
	}
	checkCPUScrape(t, in.ip.String())

	kubeconfig := filepath.Join(in.stateDir, KubeconfigFile)
	for _, f := range []string{kubeconfig, filepath.Join(in.stateDir, "pki", "tokens.csv"), filepath.Join(in.stateDir, "pki", "ca.key"), filepath.Join(in.stateDir, "pki", "sa.key")} {
		if fi, err := os.Stat(f); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, mode %v; want 0600", f, err, fi.Mode().Perm())
		}
	}
	kubectl, _ := kubebin.Path("kubectl")
	out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "get", "nodes", "--no-headers").CombinedOutput()
	if fields := strings.Fields(string(out)); err != nil || len(fields) < 2 || fields[0] != in.name || fields[1] != "Ready" {
		t.Errorf("kubectl get nodes: %v\n%s", err, out)
	}
	if out, err := exec.Command(kubectl, "--kubeconfig", kubeconfig, "logs", "deployment/hello").CombinedOutput(); err != nil || !strings.Contains(string(out), "serving") {
		t.Errorf("kubectl logs (API server -> kubelet): %v\n%s", err, out)
	}

	stopAt := time.Now()
	if err := in.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := in.waitExit(t, 30*time.Second); code != 0 {
		t.Errorf("exit code after SIGTERM = %d, want 0", code)
	}
	t.Logf("SIGTERM -> exit: %.2fs", time.Since(stopAt).Seconds())
	st = in.waitPhase(t, PhaseStopped, time.Second)
	if !strings.Contains(fmt.Sprint(st.Steps), "workload stopped") {
		t.Errorf("the workload was not stopped gracefully: steps %v", st.Steps)
	}
	hs, err := cgroups.Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	if pids := cgroups.Procs(hs, in.cgroupRoot); len(pids) > 0 {
		t.Errorf("processes left in %s after the agent exited: %v", in.cgroupRoot, pids)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), in.dir) {
		t.Errorf("mounts under %s reached the host", in.dir)
	}
}

// TestIntegrationAgentFailsOnUnavailableWorkload boots a workload that never becomes available
// (its container exits at once: hello refuses a DELAY that is not a duration) and checks that
// the boot fails at the ready timeout naming the workload, the container and why. (An image
// missing from the bundle, ErrImageNeverPull, fails at once, but herd image build refuses such a
// bundle, so it cannot be booted here.)
func TestIntegrationAgentFailsOnUnavailableWorkload(t *testing.T) {
	requireIntegration(t)
	tmp := t.TempDir()
	agentBin := buildAgent(t, tmp)
	src := filepath.Join(tmp, "src")
	if err := os.MkdirAll(filepath.Join(src, "manifests"), 0o755); err != nil {
		t.Fatal(err)
	}
	app, err := filepath.Abs("../../examples/hello/app")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"image.yaml": `apiVersion: herd.dev/v1alpha1
kind: NodeImage
metadata: {name: broken}
spec:
  manifests: manifests
  addons: {dns: false, storage: false, metrics: false}
  images: [{name: "hello:v1", main: ` + app + `}]
`,
		"manifests/deployment.yaml": `apiVersion: apps/v1
kind: Deployment
metadata: {name: crashing, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: crashing}}
  template:
    metadata: {labels: {app: crashing}}
    spec:
      containers:
      - name: app
        image: hello:v1
        imagePullPolicy: Never
        env: [{name: DELAY, value: not-a-duration}]
`,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bundle, err := image.Build(context.Background(), filepath.Join(src, "image.yaml"), image.NewStore(filepath.Join(tmp, "images")), nil)
	if err != nil {
		t.Fatal(err)
	}
	exclusive(t)

	in := startInstance(t, agentBin, bundle, "--ready-timeout", "20s")
	st := in.waitPhase(t, PhaseFailed, 2*time.Minute)
	t.Logf("reason: %s", st.Reason)
	for _, want := range []string{"Deployment default/crashing", "container app"} {
		if !strings.Contains(st.Reason, want) {
			t.Errorf("reason %q does not contain %q", st.Reason, want)
		}
	}
	if !strings.Contains(st.Reason, "exit code 1") && !strings.Contains(st.Reason, "CrashLoopBackOff") {
		t.Errorf("reason %q says neither how the container exited nor that it is crash-looping", st.Reason)
	}
	// The app's own words on why it exits: the last lines of its log.
	if !strings.Contains(st.Reason, "last log lines: ") || !strings.Contains(st.Reason, `DELAY=\"not-a-duration\"`) {
		t.Errorf("reason %q does not give the container's last log lines", st.Reason)
	}
	if code := in.waitExit(t, 30*time.Second); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	hs, err := cgroups.Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	if pids := cgroups.Procs(hs, in.cgroupRoot); len(pids) > 0 {
		t.Errorf("processes left in %s after a failed boot: %v", in.cgroupRoot, pids)
	}
}

func TestIntegrationAgentFailsWhenAComponentExits(t *testing.T) {
	requireIntegration(t)
	agentBin, bundle := buildHello(t)
	exclusive(t)
	in := startInstance(t, agentBin, bundle)
	in.waitPhase(t, PhaseReady, 2*time.Minute)

	hs, err := cgroups.Hierarchies()
	if err != nil {
		t.Fatal(err)
	}
	// The scheduler runs in a process of its own, or with other components in kube-combined's
	// when that binary is built: killing that process must fail the instance, naming it.
	host := ""
	for _, pid := range cgroups.Procs(hs, in.cgroupRoot) {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		name := filepath.Base(args[0])
		if name == "kube-scheduler" || name == "kube-combined" && slices.Contains(args[1:], "kube-scheduler") {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			host = name
		}
	}
	if host == "" {
		t.Fatal("no process running kube-scheduler in the instance's cgroup")
	}
	t.Logf("killed %s, which runs kube-scheduler", host)
	st := in.waitPhase(t, PhaseFailed, 30*time.Second)
	if !strings.Contains(st.Reason, host) || !strings.Contains(st.Reason, "signal: killed") {
		t.Errorf("reason %q does not name %s and how it ended", st.Reason, host)
	}
	if code := in.waitExit(t, 30*time.Second); code != 1 {
		t.Errorf("exit code = %d, want 1", code)
	}
	if pids := cgroups.Procs(hs, in.cgroupRoot); len(pids) > 0 {
		t.Errorf("processes left in %s after the failure: %v", in.cgroupRoot, pids)
	}
}

// checkCPUScrape reads the agent at address as the control plane's CPU source does, until two
// scrapes give the instance's CPU use: a booted cluster always uses some.
func checkCPUScrape(t *testing.T, address string) {
	t.Helper()
	sc, err := agentmetrics.New(agentmetrics.Options{Port: DefaultPort, Interval: time.Second, Credential: func(string) string { return testCredential }, Targets: func() []agentmetrics.Target {
		return []agentmetrics.Target{{Fleet: "f", Instance: "i", Address: address}}
	}})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		sc.ScrapeOnce(context.Background())
		if percent, n, ok := sc.FleetCPU("f"); ok && n == 1 && percent > 0 {
			t.Logf("CPU use read from the agent's /metrics: %.1f%% of a core", percent)
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no CPU figure from the agent's /metrics after 20s")
		}
		time.Sleep(500 * time.Millisecond) // the next sample must be apart from this one
	}
}
