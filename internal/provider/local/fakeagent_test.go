package local

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/local/localtest"
	"herd.dev/herd/internal/provider/providertest"
)

// fakeAgentEnv makes the test binary act as herd-agent when the provider starts it. Its value
// is the behaviour: "ok" boots and stops cleanly, "ignore-term" never stops on SIGTERM, "fail"
// reports Failed and exits 1.
const fakeAgentEnv = "HERD_LOCAL_FAKE_AGENT"

// fakeAgent follows the agent's side of the contract, without Kubernetes: it checks it has a
// mount namespace of its own, makes / a slave, moves into <cgroup-root>/system in every
// hierarchy, mounts a tmpfs under its state dir, starts a child in <cgroup-root>/kubepods, serves
// /readyz on <address>:10260, and writes status.json.
func fakeAgent(mode string, args []string) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	name := fs.String("name", "", "")
	fs.String("bundle", "", "")
	stateDir := fs.String("state-dir", "", "")
	address := fs.String("address", "", "")
	cgroupRoot := fs.String("cgroup-root", "", "")
	credentialFile := fs.String("credential-file", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	credential, err := agentauth.ReadCredentialFile(*credentialFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake agent:", err)
		return 2
	}
	start := time.Now()
	var steps []map[string]any
	status := func(phase, reason string) {
		steps = append(steps, map[string]any{"name": phase, "seconds": time.Since(start).Seconds()})
		data, _ := json.Marshal(map[string]any{"phase": phase, "reason": reason, "updatedAt": time.Now().UTC(), "steps": steps})
		tmp := filepath.Join(*stateDir, ".status.tmp")
		if err := os.WriteFile(tmp, data, 0o600); err == nil {
			_ = os.Rename(tmp, filepath.Join(*stateDir, statusFile))
		}
	}
	fail := func(format string, a ...any) int {
		msg := fmt.Sprintf(format, a...)
		fmt.Fprintln(os.Stderr, "fake agent:", msg)
		status(agentFailed, msg)
		return 1
	}
	self, _ := os.Readlink("/proc/self/ns/mnt")
	host, _ := os.Readlink("/proc/1/ns/mnt")
	if self == host {
		return fail("not in a mount namespace of its own")
	}
	if err := unix.Mount("", "/", "", unix.MS_SLAVE|unix.MS_REC, ""); err != nil {
		return fail("make / a slave: %v", err)
	}
	fmt.Println("fake agent", *name, "booting at", *address)
	status(agentBooting, "")
	hier, err := cgroupHierarchies()
	if err != nil {
		return fail("%v", err)
	}
	for _, sub := range []string{"system", "kubepods"} {
		for _, h := range hier {
			d := filepath.Join(h, *cgroupRoot, sub)
			if err := os.MkdirAll(d, 0o755); err != nil {
				return fail("cgroup %s: %v", d, err)
			}
			if filepath.Base(h) == "cpuset" {
				for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
					v, _ := os.ReadFile(filepath.Join(h, f))
					_ = os.WriteFile(filepath.Join(h, *cgroupRoot, f), v, 0o644)
					_ = os.WriteFile(filepath.Join(d, f), v, 0o644)
				}
			}
		}
	}
	join := func(sub string, pid int) error {
		for _, h := range hier {
			if err := os.WriteFile(filepath.Join(h, *cgroupRoot, sub, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
				return fmt.Errorf("join %s in %s: %w", sub, h, err)
			}
		}
		return nil
	}
	if err := join("system", os.Getpid()); err != nil {
		return fail("%v", err)
	}
	mnt := filepath.Join(*stateDir, "mnt")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return fail("%v", err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		return fail("mount tmpfs: %v", err)
	}
	if mode == "fail" {
		return fail("manifest deployment/web: the API server said no")
	}
	child := exec.Command("sleep", "3600")
	if err := child.Start(); err != nil {
		return fail("start child: %v", err)
	}
	if err := join("kubepods", child.Process.Pid); err != nil {
		return fail("%v", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(*address, "10260"))
	if err != nil {
		return fail("listen: %v", err)
	}
	go func() {
		_ = http.Serve(ln, agentauth.Require(credential, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintln(w, "ok", *name)
		})))
	}()
	if mode == "ignore-term" {
		signal.Ignore(syscall.SIGTERM)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	status(agentReady, "")
	<-sigs
	status(agentStopping, "")
	_ = child.Process.Kill()
	_, _ = child.Process.Wait()
	status(agentStopped, "")
	return 0
}

// waitStatus waits until the agent in dir reports phase.
func waitStatus(t *testing.T, dir, phase string) {
	t.Helper()
	err := hostproc.WaitFor(context.Background(), 10*time.Second, func() bool {
		return readStatus(dir).Phase == phase
	}, "agent status "+phase)
	if err != nil {
		t.Fatal(err)
	}
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces, links and cgroups")
	}
	for _, c := range []string{"ip", "nsenter", "sleep"} {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("needs %s (make deps)", c)
		}
	}
}

// owned is what a test's instances make on the host, for the leak checks.
func owned(p *Provider, region string, names ...string) localtest.Owned {
	o := localtest.Owned{Dirs: []string{p.opts.DataDir}}
	if region != "" {
		router, internet, veth := p.Lab().RegionHostNames(region)
		o.Links = append(o.Links, p.BridgeName(region), veth)
		o.Netns = append(o.Netns, router, internet)
	}
	for _, n := range names {
		ns, veth, cg := HostNames(n)
		o.Netns = append(o.Netns, ns)
		o.Links = append(o.Links, veth)
		o.Cgroups = append(o.Cgroups, strings.TrimPrefix(cg, "/"))
		o.Gone = append(o.Gone, p.InstanceDir(n))
	}
	return o
}

// testExecutable returns a herd binary whose herd-agent beside it is this test binary: links to it
// in a directory of the test's own.
func testExecutable(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, name := range []string{"herd", "herd-agent"} {
		if err := os.Symlink(exe, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "herd")
}

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%s", prefix, randomHex(3))
}

// testRegion is the region of the fake agent tests' instances.
const testRegion = "ut"

// newFakeAgentProvider skips unless the test may make namespaces and cgroups, and returns a
// provider on a fresh data directory that starts this test binary as its agent, with the digest
// of its bundle. When the test ends it deletes the instances named and checks that nothing of
// them is left on the host; assertClean runs that check on demand.
func newFakeAgentProvider(t *testing.T, names ...string) (p *Provider, digest string, assertClean func()) {
	t.Helper()
	requireRoot(t)
	localtest.Exclusive(t) // the leak check compares host-wide state that real instances change
	before := localtest.Take(t)
	p, digest = newTestProvider(t, testExecutable(t))
	assertClean = func() {
		t.Helper()
		localtest.AssertClean(t, before, owned(p, testRegion, names...))
	}
	t.Cleanup(func() {
		for _, n := range names {
			_ = p.Delete(context.Background(), n)
		}
		assertClean()
	})
	return p, digest, assertClean
}

// TestFakeAgentLifecycle runs the provider's whole process and network handling against the fake
// agent: create, ready, reachable at its address, failed when killed, clean after Delete.
func TestFakeAgentLifecycle(t *testing.T) {
	t.Setenv(fakeAgentEnv, "ok")
	a, b := uniqueName("ut-a"), uniqueName("ut-b")
	p, digest, assertClean := newFakeAgentProvider(t, a, b)
	ctx := context.Background()
	spec := func(name string) provider.InstanceSpec {
		return provider.InstanceSpec{Name: name, Image: "fake", Region: testRegion, Labels: map[string]string{"herd.dev/fleet": "ut"}}
	}
	inA, err := p.Create(ctx, spec(a))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(p.dir, hostSettingsFile)); err != nil {
		t.Errorf("the host's kernel settings were not recorded before the first instance started: %v", err)
	}
	kubeletStarts(t, p.opts.SysctlRoot)
	if inA.State != provider.StateBooting || inA.Address == "" || inA.Image != digest {
		t.Fatalf("Create returned %+v", inA)
	}
	inB, err := p.Create(ctx, spec(b))
	if err != nil {
		t.Fatal(err)
	}
	if inA.Address == inB.Address {
		t.Fatalf("two instances share %s", inA.Address)
	}
	for _, in := range []provider.Instance{inA, inB} {
		providertest.WaitForState(t, p, in.Name, provider.StateReady, 10*time.Second)
		// The agent's port answers herd up, which holds the instance's credential, and nobody else.
		keys, err := agentauth.Open(p.opts.DataDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, cred := range []string{"", keys.Credential(in.Name)} {
			req, _ := http.NewRequest(http.MethodGet, "http://"+net.JoinHostPort(in.Address, "10260")+"/readyz", nil)
			verify := func(*http.Response) error { return nil }
			if cred != "" {
				verify = agentauth.Authorize(req, cred)
			}
			resp, err := (&http.Client{Timeout: 2 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("%s at %s: %v", in.Name, in.Address, err)
			}
			resp.Body.Close()
			switch {
			case cred == "" && resp.StatusCode != http.StatusUnauthorized:
				t.Errorf("%s answered a request without its credential: %s", in.Name, resp.Status)
			case cred != "" && (resp.StatusCode != http.StatusOK || verify(resp) != nil):
				t.Errorf("%s with its credential: %s, %v", in.Name, resp.Status, verify(resp))
			}
		}
	}
	// The instance's own mounts stay in its mount namespace.
	if left, _ := localtest.Leftovers(localtest.Owned{Dirs: []string{p.InstanceDir(a)}}); len(left) > 0 {
		for _, l := range left {
			if strings.HasPrefix(l, "mount") {
				t.Errorf("an instance mount reached the host: %s", l)
			}
		}
	}
	// A second Create of the name returns the same instance.
	again, err := p.Create(ctx, spec(a))
	if err != nil || again.ProviderID != inA.ProviderID {
		t.Fatalf("second Create = %+v, %v", again, err)
	}
	// A restarted provider lists them.
	p2, err := New(Options{DataDir: p.opts.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	if list, err := p2.List(ctx, provider.ListOptions{Fleet: "ut"}); err != nil || len(list) != 2 {
		t.Fatalf("List from a new provider = %v, %v", list, err)
	}

	// kill -9 of every process of a: Failed with the agent's last words.
	pids, err := localtest.CgroupPIDs(cgroupRootOf(a))
	if err != nil || len(pids) < 2 {
		t.Fatalf("pids of %s: %v, %v", a, pids, err)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	in := providertest.WaitForState(t, p, a, provider.StateFailed, 5*time.Second)
	if !strings.Contains(in.Reason, "agent exited unexpectedly") || !strings.Contains(in.Reason, "fake agent") {
		t.Errorf("reason of a killed instance: %q", in.Reason)
	}

	// Delete a (killed) and b (running, stops on SIGTERM): the bridge stays until the last one.
	if err := p.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if !hostnet.LinkExists(p.BridgeName(testRegion)) {
		t.Error("the bridge went while an instance of its region remains")
	}
	assertSysctls(t, p.opts.SysctlRoot, map[string]string{"kernel.panic": "10"})
	start := time.Now()
	if err := p.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("deleting a running instance took %s", d)
	}
	if err := p.Delete(ctx, b); err != nil {
		t.Fatalf("second Delete: %v", err)
	}
	if _, err := p.Get(ctx, b); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	assertSysctls(t, p.opts.SysctlRoot, hostOriginals)
	assertClean()
}

// TestFakeAgentStubbornAndFailing: an agent that ignores SIGTERM is killed after StopTimeout; an
// agent that fails reports its reason.
func TestFakeAgentStubbornAndFailing(t *testing.T) {
	a, b := uniqueName("ut-stub"), uniqueName("ut-fail")
	p, _, assertClean := newFakeAgentProvider(t, a, b)
	p.opts.StopTimeout = 300 * time.Millisecond
	ctx := context.Background()
	t.Setenv(fakeAgentEnv, "ignore-term")
	if _, err := p.Create(ctx, provider.InstanceSpec{Name: a, Image: "fake", Region: testRegion}); err != nil {
		t.Fatal(err)
	}
	providertest.WaitForState(t, p, a, provider.StateReady, 10*time.Second)
	t.Setenv(fakeAgentEnv, "fail")
	if _, err := p.Create(ctx, provider.InstanceSpec{Name: b, Image: "fake", Region: testRegion}); err != nil {
		t.Fatal(err)
	}
	in := providertest.WaitForState(t, p, b, provider.StateFailed, 10*time.Second)
	if in.Reason != "manifest deployment/web: the API server said no" {
		t.Errorf("reason = %q", in.Reason)
	}
	if err := p.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := p.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	assertClean()
}

// TestInterruptedCreate: a Create killed after it wrote the record (and set up part of the
// instance) is reported Failed, completed by the next Create, and cleaned by Delete; a crash
// before the record leaves a directory that a Create reuses.
func TestInterruptedCreate(t *testing.T) {
	t.Setenv(fakeAgentEnv, "ok")
	a, b := uniqueName("ut-int-a"), uniqueName("ut-int-b")
	p, digest, assertClean := newFakeAgentProvider(t, a, b)
	ctx := context.Background()
	// What a Create does up to the crash: the record with its address, the bridge, the network.
	half := func(name string) *record {
		dir := p.InstanceDir(name)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		r := &record{Spec: provider.InstanceSpec{Name: name, Image: digest, Region: testRegion}, ID: "local-x", Phase: phaseCreating,
			Netns: netnsName(name), HostVeth: vethName(name), CgroupRoot: cgroupRootOf(name), BundleDir: "/nonexistent"}
		if err := p.allocate(ctx, dir, r); err != nil {
			t.Fatal(err)
		}
		if err := setupInstanceNetwork(ctx, r); err != nil {
			t.Fatal(err)
		}
		return r
	}
	ra := half(a)
	in, err := p.Get(ctx, a)
	if err != nil || in.State != provider.StateFailed || !strings.Contains(in.Reason, "interrupted") {
		t.Fatalf("an interrupted create shows %+v, %v", in, err)
	}
	got, err := p.Create(ctx, provider.InstanceSpec{Name: a, Image: "fake", Region: testRegion})
	if err != nil {
		t.Fatalf("completing the create: %v", err)
	}
	if got.Address != ra.Address {
		t.Errorf("the completed create moved from %s to %s", ra.Address, got.Address)
	}
	providertest.WaitForState(t, p, a, provider.StateReady, 10*time.Second)

	half(b)
	if err := p.Delete(ctx, b); err != nil {
		t.Fatalf("deleting an interrupted create: %v", err)
	}
	// Killed after the agent started but before its pid was recorded: Delete finds the agent
	// (by its cgroup, network namespace and command line) and removes everything.
	rb := half(b)
	if _, _, err := p.startAgent(ctx, p.InstanceDir(b), rb, image.Bundle{}); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, p.InstanceDir(b), agentReady)
	if in, err := p.Get(ctx, b); err != nil || in.State != provider.StateFailed {
		t.Fatalf("an interrupted create with a running agent shows %+v, %v", in, err)
	}
	if err := p.Delete(ctx, b); err != nil {
		t.Fatalf("deleting an interrupted create with a running agent: %v", err)
	}
	ob := owned(p, "", b)
	ob.Dirs = []string{p.InstanceDir(b)} // a still runs
	if left, _ := localtest.Leftovers(ob); len(left) > 0 {
		t.Fatalf("left behind by an interrupted create with a running agent: %v", left)
	}
	if err := p.Delete(ctx, a); err != nil {
		t.Fatal(err)
	}
	// A crash right after mkdir: an empty directory, reused by the next Create.
	if err := os.MkdirAll(p.InstanceDir(b), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, b); !errors.Is(err, provider.ErrNotFound) {
		t.Fatalf("Get of an empty instance dir: %v", err)
	}
	if _, err := p.Create(ctx, provider.InstanceSpec{Name: b, Image: "fake", Region: testRegion}); err != nil {
		t.Fatal(err)
	}
	providertest.WaitForState(t, p, b, provider.StateReady, 10*time.Second)
	if err := p.Delete(ctx, b); err != nil {
		t.Fatal(err)
	}
	assertClean()
}

// TestFakeAgentConformance runs the provider conformance suite with the fake agent.
func TestFakeAgentConformance(t *testing.T) {
	requireRoot(t)
	t.Setenv(fakeAgentEnv, "ok")
	localtest.Exclusive(t) // the leak check compares host-wide state that real instances change
	before := localtest.Take(t)
	var p *Provider
	// Registered first, so it runs after the suite's own cleanup has deleted its instances.
	t.Cleanup(func() { localtest.AssertClean(t, before, owned(p, "r1", "conf-a-1", "conf-b-1")) })
	providertest.Run(t, func(t *testing.T) provider.Provider {
		p, _ = newTestProvider(t, testExecutable(t))
		return p
	}, providertest.Options{
		Image:        "fake",
		ReadyTimeout: 10 * time.Second,
		AfterDelete: func(t *testing.T, in provider.Instance) {
			// The other instance of r1 still runs: its region's bridge and network stay.
			o := owned(p, "", in.Name)
			o.Dirs = []string{p.InstanceDir(in.Name)}
			left, err := localtest.Leftovers(o)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range left {
				t.Errorf("left behind: %s", l)
			}
		},
	})
}
