package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/image/imagetest"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/statefile"
)

func TestMain(m *testing.M) {
	// The provider's tests start this binary as a stand-in for herd-agent (see fakeagent_test.go).
	if mode := os.Getenv(fakeAgentEnv); mode != "" && filepath.Base(os.Args[0]) == "herd-agent" {
		os.Exit(fakeAgent(mode, os.Args[1:]))
	}
	// Regions' links are carried by `herd link-relay`: this binary runs the same code.
	if len(os.Args) == 4 && os.Args[1] == netlab.LinkRelayCommand && os.Args[2] == "--link-config" {
		if err := netlab.RunLinkRelay(context.Background(), os.Args[3], slog.Default()); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestHostNamesFitTheKernelLimits(t *testing.T) {
	long := strings.Repeat("a", 63)
	for _, name := range []string{"a", "hello-1-abcde", long} {
		if v := vethName(name); len(v) > 15 {
			t.Errorf("veth name %q of %q is longer than 15 bytes", v, name)
		}
		if b := bridgeName("/var/lib/herd", name); len(b) > 15 {
			t.Errorf("bridge name %q is longer than 15 bytes", b)
		}
	}
	if vethName("a") == vethName("b") {
		t.Error("two instances share a veth name")
	}
	if bridgeName("/d1", "r") == bridgeName("/d2", "r") {
		t.Error("two data directories share a bridge for one region name")
	}
	if bridgeName("/d1", "r1") == bridgeName("/d1", "r2") {
		t.Error("two regions share a bridge")
	}
}

func TestPickHost(t *testing.T) {
	tests := []struct {
		last int
		used []int
		want int
	}{
		{last: 0, want: 10},
		{last: 10, want: 11},
		{last: 10, used: []int{11, 12}, want: 13},
		{last: 254, want: 10},                  // wraps
		{last: 254, used: []int{10}, want: 11}, // wraps and skips
		{last: 50, used: []int{51}, want: 52},
	}
	for _, tc := range tests {
		used := map[int]bool{}
		for _, u := range tc.used {
			used[u] = true
		}
		got, err := pickHost(tc.last, used)
		if err != nil || got != tc.want {
			t.Errorf("pickHost(%d, %v) = %d, %v; want %d", tc.last, tc.used, got, err, tc.want)
		}
	}
	all := map[int]bool{}
	for h := firstHost; h <= lastHost; h++ {
		all[h] = true
	}
	if _, err := pickHost(10, all); err == nil {
		t.Error("a full subnet gave an address")
	}
}

func TestRecordRoundTripAndMode(t *testing.T) {
	dir := t.TempDir()
	if r, err := readRecord(dir); r != nil || err != nil {
		t.Fatalf("readRecord of an empty dir = %v, %v", r, err)
	}
	in := &record{Spec: provider.InstanceSpec{Name: "a", Labels: map[string]string{"k": "v"}}, ID: "local-1", Phase: phaseCreated, Address: "10.213.0.10", AgentPID: 42, AgentStartTime: 7}
	if err := writeRecord(dir, in); err != nil {
		t.Fatal(err)
	}
	out, err := readRecord(dir)
	if err != nil || out.Spec.Labels["k"] != "v" || out.AgentStartTime != 7 || out.Address != in.Address {
		t.Fatalf("readRecord = %+v, %v", out, err)
	}
	fi, err := os.Stat(filepath.Join(dir, recordFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("instance.json mode %v, %v; want 0600", fi.Mode(), err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
	if err := os.WriteFile(filepath.Join(dir, recordFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readRecord(dir); err == nil || !strings.Contains(err.Error(), recordFile) {
		t.Errorf("a corrupt record gives %v", err)
	}
}

func TestIsAgentOf(t *testing.T) {
	state := "/data/providers/local/instances/a/agent"
	cmd := func(args ...string) []string { return args }
	for _, tc := range []struct {
		cmdline []string
		want    bool
	}{
		{cmd("/usr/bin/herd-agent", "--name", "a", "--state-dir", state, "--address", "10.213.0.10"), true},
		{cmd("nsenter", "--net=/run/netns/herd-a", "--", "/usr/bin/herd-agent", "--state-dir", state), true},
		{cmd("/usr/bin/herd-agent", "--state-dir="+state), true},
		{cmd("/usr/bin/herd", "agent", "--state-dir", state), true},   // started by an older herd
		{cmd("/usr/bin/herd-agent", "--state-dir", state+"b"), false}, // another instance
		{cmd("tail", "-f", state+"/logs/kubelet.log"), false},         // a user reading a log
		{cmd("/usr/bin/herd", "up", "--state-dir", state), false},
	} {
		if got := isAgentOf(tc.cmdline, state); got != tc.want {
			t.Errorf("isAgentOf(%q) = %v, want %v", tc.cmdline, got, tc.want)
		}
	}
}

func TestMountInfoParsing(t *testing.T) {
	f := filepath.Join(t.TempDir(), "mountinfo")
	content := `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime shared:9 - cgroup cgroup rw,cpu
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 23 0:40 / /data/inst/a\040b rw - tmpfs tmpfs rw
51 50 0:41 / /data/inst/a\040b/agent/x rw - overlay overlay rw
52 23 0:42 / /data/inst/ab rw - tmpfs tmpfs rw
`
	if err := os.WriteFile(f, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	old := mountInfoPath
	mountInfoPath = f
	defer func() { mountInfoPath = old }()
	h, err := cgroupHierarchies()
	if err != nil || strings.Join(h, ",") != "/sys/fs/cgroup/cpu,/sys/fs/cgroup/unified" {
		t.Fatalf("cgroupHierarchies = %v, %v", h, err)
	}
	m, err := mountsUnder("/data/inst/a b")
	if err != nil || strings.Join(m, ",") != "/data/inst/a b/agent/x,/data/inst/a b" {
		t.Fatalf("mountsUnder = %q, %v (want deepest first, not the sibling)", m, err)
	}
}

// newTestProvider returns a provider on a fresh data directory with one bundle in its image store,
// whose host checks pass and whose kernel settings are a directory of the test's own.
func newTestProvider(t *testing.T, herdBinary string) (*Provider, string) {
	t.Helper()
	dataDir := t.TempDir()
	digest := writeBundle(t, dataDir)
	p, err := New(Options{DataDir: dataDir, HerdBinary: herdBinary, StopTimeout: 5 * time.Second, SysctlRoot: fakeSysctls(t, hostOriginals)})
	if err != nil {
		t.Fatal(err)
	}
	p.deps = func() error { return nil }
	return p, digest
}

// writeBundle puts a minimal bundle into the data directory's image store under the name "fake".
func writeBundle(t *testing.T, dataDir string) string {
	return imagetest.WriteBundle(t, dataDir, "fake")
}

func TestCreateRejectsBadInputAndChangesNothing(t *testing.T) {
	p, digest := newTestProvider(t, "/bin/true")
	ctx := context.Background()
	cases := []struct {
		name string
		spec provider.InstanceSpec
		want string
	}{
		{"bad name", provider.InstanceSpec{Name: "Bad_Name", Image: digest}, "DNS label"},
		{"no image", provider.InstanceSpec{Name: "a"}, "image is required"},
		{"bad region", provider.InstanceSpec{Name: "a", Image: digest, Region: "Not A Label"}, "region"},
		{"options", provider.InstanceSpec{Name: "a", Image: digest, Options: map[string]string{"bootDelay": "1s"}}, "options.bootDelay: Forbidden: unknown option: the local provider knows latency, jitter, loss"},
		{"bad latency", provider.InstanceSpec{Name: "a", Image: digest, Options: map[string]string{"latency": "-5ms"}}, "options.latency: Invalid value: \"-5ms\": must not be negative"},
		{"missing image", provider.InstanceSpec{Name: "a", Image: "nope"}, "image nope not found: build it with herd image build -f"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := p.Create(ctx, tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Create: %v, want an error containing %q", err, tc.want)
			}
			if tc.name == "missing image" && !errors.Is(err, image.ErrNotFound) {
				t.Errorf("the error does not wrap image.ErrNotFound: %v", err)
			}
			entries, _ := os.ReadDir(p.instancesDir())
			if len(entries) != 0 {
				t.Fatalf("a rejected Create left %v", entries)
			}
		})
	}
	p.deps = func() error { return errors.New("missing etcd: install them with make deps") }
	if _, err := p.Create(ctx, provider.InstanceSpec{Name: "a", Image: digest}); err == nil || !strings.Contains(err.Error(), "make deps") {
		t.Fatalf("Create with a missing dependency: %v", err)
	}
	if list, err := p.List(ctx, provider.ListOptions{}); err != nil || len(list) != 0 {
		t.Fatalf("List after rejected creates: %v, %v", list, err)
	}
}

func TestCheckHostNamesTheFix(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("HERD_CACHE_DIR", t.TempDir())
	err := CheckHost(filepath.Join(t.TempDir(), "herd"))
	if err == nil {
		t.Fatal("CheckHost passed with an empty PATH")
	}
	for _, want := range []string{"containerd", "etcd", "nsenter", "make deps", "kube-apiserver", "make kubernetes", "make build", "herd-agent"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not name %q: %v", want, err)
		}
	}
}

func TestGetAndListReadTheInstanceDirectories(t *testing.T) {
	p, digest := newTestProvider(t, "/bin/true")
	ctx := context.Background()
	self, _ := hostproc.ReadStat(os.Getpid())
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name, fleet, phase string, pid int, start uint64, status string) {
		t.Helper()
		dir := p.InstanceDir(name)
		if err := os.MkdirAll(filepath.Join(dir, agentDirName), 0o700); err != nil {
			t.Fatal(err)
		}
		r := &record{Spec: provider.InstanceSpec{Name: name, Image: digest, Region: "r1", Labels: map[string]string{"herd.dev/fleet": fleet}},
			ID: "local-" + name, Phase: phase, Address: "10.213.0.10", AgentPID: pid, AgentStartTime: start, CreatedAt: time.Now()}
		if err := writeRecord(dir, r); err != nil {
			t.Fatal(err)
		}
		if status != "" {
			if err := os.WriteFile(filepath.Join(dir, agentDirName, statusFile), []byte(status), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(t.TempDir(), "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mk("booting", "f", phaseCreated, os.Getpid(), self.StartTime, "")
	mk("booting2", "f", phaseCreated, os.Getpid(), self.StartTime, `{"phase":"Booting"}`)
	mk("ready", "f", phaseCreated, os.Getpid(), self.StartTime, `{"phase":"Ready"}`)
	mk("failed", "f", phaseCreated, 0, 0, `{"phase":"Failed","reason":"manifest deployment/web: forbidden"}`)
	mk("died", "g", phaseCreated, dead.Process.Pid, 1, `{"phase":"Ready"}`)
	mk("stopped", "g", phaseCreated, os.Getpid(), self.StartTime, `{"phase":"Stopped"}`)
	mk("interrupted", "g", phaseCreating, 0, 0, "")
	mk("deleting", "g", phaseDeleting, 0, 0, "")
	if err := os.WriteFile(filepath.Join(p.InstanceDir("died"), agentLogName), []byte("boot: started etcd\npanic: boom\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A directory without a record (a Create that died before writing it) is not an instance.
	if err := os.MkdirAll(p.InstanceDir("empty"), 0o700); err != nil {
		t.Fatal(err)
	}

	want := map[string]struct {
		state  provider.State
		reason string
	}{
		"booting":     {provider.StateBooting, ""},
		"booting2":    {provider.StateBooting, ""},
		"ready":       {provider.StateReady, ""},
		"failed":      {provider.StateFailed, "manifest deployment/web: forbidden"},
		"died":        {provider.StateFailed, "agent exited unexpectedly; last lines of " + filepath.Join(p.InstanceDir("died"), agentLogName) + ": boot: started etcd | panic: boom"},
		"stopped":     {provider.StateFailed, "stopped from outside herd"},
		"interrupted": {provider.StateFailed, "interrupted"},
		"deleting":    {provider.StateDeleting, ""},
	}
	all, err := p.List(ctx, provider.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(want) {
		t.Fatalf("List = %d instances, want %d", len(all), len(want))
	}
	for _, in := range all {
		w := want[in.Name]
		if in.State != w.state || !strings.Contains(in.Reason, w.reason) {
			t.Errorf("%s: %s %q, want %s %q", in.Name, in.State, in.Reason, w.state, w.reason)
		}
		if in.ProviderID != "local-"+in.Name || in.Address != "10.213.0.10" || in.Image != digest || in.Region != "r1" {
			t.Errorf("%s: %+v", in.Name, in)
		}
	}
	g, err := p.List(ctx, provider.ListOptions{Fleet: "g"})
	if err != nil || len(g) != 4 {
		t.Fatalf("List(fleet g) = %v, %v", g, err)
	}
	// An interrupted Create still being made (its lock held) is Booting, not Failed.
	lk, err := statefile.Lock(filepath.Join(p.InstanceDir("interrupted"), lockFileName))
	if err != nil {
		t.Fatal(err)
	}
	if in, _ := p.Get(ctx, "interrupted"); in.State != provider.StateBooting {
		t.Errorf("a Create in progress shows %s %q", in.State, in.Reason)
	}
	lk.Unlock()
	if _, err := p.Get(ctx, "empty"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get(empty) = %v, want ErrNotFound", err)
	}
	if _, err := p.Get(ctx, "../x"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("Get(../x) = %v, want ErrNotFound", err)
	}
	if err := p.Delete(ctx, "never-existed"); err != nil {
		t.Errorf("Delete of a missing instance: %v", err)
	}
}

// TestAllocationNeverCollides creates records concurrently from two providers on one data
// directory (two processes would do the same) and checks every address is different, also after
// a "crash" that left a record without anything else.
func TestAllocationNeverCollides(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: allocation creates the region's bridge")
	}
	p1, digest := newTestProvider(t, "/bin/true")
	p2, err := New(Options{DataDir: p1.opts.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	region := "alloc"
	t.Cleanup(func() { _ = hostnet.DeleteLink(context.Background(), p1.BridgeName(region)) })
	var wg sync.WaitGroup
	var mu sync.Mutex
	addrs := map[string]string{}
	for i := range 12 {
		p := p1
		if i%2 == 1 {
			p = p2
		}
		wg.Go(func() {
			name := "alloc-" + string(rune('a'+i))
			dir := p.InstanceDir(name)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Error(err)
				return
			}
			r := &record{Spec: provider.InstanceSpec{Name: name, Image: digest, Region: region}, Phase: phaseCreating}
			if err := p.allocate(ctx, dir, r); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if other, dup := addrs[r.Address]; dup {
				t.Errorf("%s and %s both got %s", name, other, r.Address)
			}
			addrs[r.Address] = name
		})
	}
	wg.Wait()
	if len(addrs) != 12 {
		t.Fatalf("%d addresses for 12 instances", len(addrs))
	}
	// A restarted provider continues after the addresses on disk.
	p3, err := New(Options{DataDir: p1.opts.DataDir})
	if err != nil {
		t.Fatal(err)
	}
	dir := p3.InstanceDir("alloc-z")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r := &record{Spec: provider.InstanceSpec{Name: "alloc-z", Image: digest, Region: region}, Phase: phaseCreating}
	if err := p3.allocate(ctx, dir, r); err != nil {
		t.Fatal(err)
	}
	if _, dup := addrs[r.Address]; dup {
		t.Fatalf("after a restart, %s was given again", r.Address)
	}
	regions, err := readRegions(p3.regionsDir())
	if err != nil || regions[region] == nil || !strings.HasSuffix(regions[region].Subnet, "/24") {
		t.Fatalf("region record: %+v, %v", regions[region], err)
	}
}
