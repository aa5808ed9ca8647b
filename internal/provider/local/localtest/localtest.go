// Package localtest checks that real local instances and region networks left nothing behind on
// the host: mounts, network namespaces (instances', regions' routers', the internet's, client
// networks'), links, cgroups, iptables rules, traffic shaping (qdiscs), the kubelet's
// /var/log/containers symlinks, processes (agents, link relays, regional load balancers) and
// directories (the provider's records). The local provider's integration tests and herd's
// end-to-end tests share it.
//
// Other work may run on the same host at the same time, so the checks look for what belongs to
// the test (its data directory and the names it gave) rather than for any change at all; only
// the host's iptables rules and traffic shaping, which herd never touches, and the kernel
// settings instances change and herd restores, must be exactly as they were.
package localtest

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"herd.dev/herd/internal/mountinfo"
)

// Host paths the checks read.
const (
	netnsDir         = "/run/netns"
	containerLogsDir = "/var/log/containers"
	sysctlDir        = "/proc/sys"
)

// KernelSettings are the host kernel settings every local instance's kubelet sets and the local
// provider restores after its last instance (local.KubeletHostSettings; not imported from there
// because the local package's own tests import this one).
var KernelSettings = []string{
	"vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
	"kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes",
}

// Snapshot is the host state a test compares against after it has cleaned up.
type Snapshot struct {
	// Iptables is iptables-save's output without comments and counters ("" when iptables-save
	// is not installed).
	Iptables string
	// NFTables are the host's nftables tables, one `nft list tables` line each ("" when nft is
	// not installed): kube-proxy writes its rules into a table of its own, inside the
	// instance's network namespace, which iptables-save does not show.
	NFTables string
	// Sysctls are the values of KernelSettings, "name=value" lines.
	Sysctls string
	// Qdiscs are the host's queueing disciplines that shape traffic (netem, tbf, htb, ingress...;
	// not the kernel's defaults), one "tc qdisc show" line each: herd shapes regions' links
	// inside their own namespaces and never on the host.
	Qdiscs string
	// Netns, Links, Cgroups and Mounts are what existed, for reporting what appeared since.
	Netns   []string
	Links   []string
	Cgroups []string
	Mounts  []string
}

// Take records the host's state.
func Take(t testing.TB) Snapshot {
	t.Helper()
	s, err := take()
	if err != nil {
		t.Fatalf("snapshot of the host: %v", err)
	}
	return s
}

func take() (Snapshot, error) {
	var s Snapshot
	var err error
	if s.Iptables, err = iptablesSave(); err != nil {
		return s, err
	}
	if s.NFTables, err = nftTables(); err != nil {
		return s, err
	}
	s.Sysctls = kernelSettings()
	if s.Qdiscs, err = shapingQdiscs(); err != nil {
		return s, err
	}
	if s.Netns, err = netnsNames(); err != nil {
		return s, err
	}
	if s.Links, err = linkNames(); err != nil {
		return s, err
	}
	if s.Cgroups, err = cgroupTops(); err != nil {
		return s, err
	}
	ms, err := mountPoints()
	if err != nil {
		return s, err
	}
	s.Mounts = ms
	return s, nil
}

// Appeared lists what exists in now and not in s (for a report; other work on the host may
// have made some of it).
func (s Snapshot) Appeared(now Snapshot) []string {
	var out []string
	diff := func(kind string, before, after []string) {
		for _, x := range after {
			if !slices.Contains(before, x) {
				out = append(out, kind+" "+x)
			}
		}
	}
	diff("netns", s.Netns, now.Netns)
	diff("link", s.Links, now.Links)
	diff("cgroup", s.Cgroups, now.Cgroups)
	diff("mount", s.Mounts, now.Mounts)
	return out
}

// Owned names what a test made on the host: the directories its instances live under and the
// host-wide names they were given.
type Owned struct {
	// Dirs are directories (a data directory, an instance directory): any mount at or under one,
	// any process whose command line names a path under one or whose working directory is under
	// one, any /var/log/containers symlink into one, and the directory itself (if Gone is set)
	// count as left behind.
	Dirs []string
	// Gone lists directories that must not exist any more.
	Gone []string
	// Netns are network namespace names, Links interface names (veths, bridges), Cgroups
	// top-level cgroup names (e.g. "herd-<instance>", checked in every hierarchy).
	Netns   []string
	Links   []string
	Cgroups []string
}

// Leftovers returns a line for everything of o still on the host.
func Leftovers(o Owned) ([]string, error) {
	var out []string
	mounts, err := mountPoints()
	if err != nil {
		return nil, err
	}
	for _, m := range mounts {
		if under(m, o.Dirs) {
			out = append(out, "mount "+m)
		}
		for _, ns := range o.Netns {
			if m == filepath.Join(netnsDir, ns) {
				out = append(out, "mount "+m)
			}
		}
	}
	nss, err := netnsNames()
	if err != nil {
		return nil, err
	}
	for _, ns := range nss {
		if slices.Contains(o.Netns, ns) {
			out = append(out, "netns "+ns)
		}
	}
	for _, ns := range o.Netns {
		if _, err := os.Lstat(filepath.Join(netnsDir, ns)); err == nil {
			out = append(out, "file "+filepath.Join(netnsDir, ns))
		}
	}
	links, err := linkNames()
	if err != nil {
		return nil, err
	}
	for _, l := range links {
		if slices.Contains(o.Links, l) {
			out = append(out, "link "+l)
		}
	}
	hier, err := CgroupHierarchies()
	if err != nil {
		return nil, err
	}
	for _, h := range hier {
		for _, c := range o.Cgroups {
			p := filepath.Join(h, c)
			if _, err := os.Stat(p); err == nil {
				out = append(out, "cgroup "+p)
			}
		}
	}
	if entries, err := os.ReadDir(containerLogsDir); err == nil {
		for _, e := range entries {
			p := filepath.Join(containerLogsDir, e.Name())
			if target, err := os.Readlink(p); err == nil && under(target, o.Dirs) {
				out = append(out, "symlink "+p+" -> "+target)
			}
		}
	}
	procs, err := processesUnder(o.Dirs)
	if err != nil {
		return nil, err
	}
	out = append(out, procs...)
	for _, d := range o.Gone {
		if _, err := os.Lstat(d); err == nil {
			out = append(out, "directory "+d)
		}
	}
	return out, nil
}

// AssertClean fails t if anything of o is left, or if the host's iptables rules or kernel
// settings differ from before. What else appeared on the host since before is logged.
func AssertClean(t testing.TB, before Snapshot, o Owned) {
	t.Helper()
	left, err := Leftovers(o)
	if err != nil {
		t.Fatalf("check what is left: %v", err)
	}
	for _, l := range left {
		t.Errorf("left behind: %s", l)
	}
	now, err := take()
	if err != nil {
		t.Fatalf("snapshot of the host: %v", err)
	}
	if now.Iptables != before.Iptables {
		t.Errorf("the host's iptables rules changed:\nbefore:\n%s\nafter:\n%s", before.Iptables, now.Iptables)
	}
	if now.NFTables != before.NFTables {
		t.Errorf("the host's nftables tables changed:\nbefore:\n%s\nafter:\n%s", before.NFTables, now.NFTables)
	}
	if now.Sysctls != before.Sysctls {
		t.Errorf("the host's kernel settings changed:\nbefore:\n%s\nafter:\n%s", before.Sysctls, now.Sysctls)
	}
	if now.Qdiscs != before.Qdiscs {
		t.Errorf("the host's traffic shaping changed:\nbefore:\n%s\nafter:\n%s", before.Qdiscs, now.Qdiscs)
	}
	if extra := before.Appeared(now); len(extra) > 0 {
		t.Logf("appeared on the host meanwhile (not this test's): %s", strings.Join(extra, ", "))
	}
}

func under(p string, dirs []string) bool {
	for _, d := range dirs {
		if d != "" && (p == d || strings.HasPrefix(p, d+"/")) {
			return true
		}
	}
	return false
}

// KeepKernelSettings puts KernelSettings back to their values of now when the test ends: for
// tests that boot a kubelet without the local provider, which is what records and restores them
// otherwise.
func KeepKernelSettings(t *testing.T) {
	t.Helper()
	before := kernelSettings()
	t.Cleanup(func() {
		for _, line := range strings.Split(before, "\n") {
			name, value, ok := strings.Cut(line, "=")
			if !ok {
				continue
			}
			path := filepath.Join(sysctlDir, strings.ReplaceAll(name, ".", "/"))
			if err := os.WriteFile(path, []byte(value+"\n"), 0o644); err != nil {
				t.Errorf("put %s back to %s: %v", name, value, err)
			}
		}
		if after := kernelSettings(); after != before {
			t.Errorf("kernel settings after the test:\n%s\nwant:\n%s", after, before)
		}
	})
}

// kernelSettings reads KernelSettings from the host, one "name=value" line each (a setting the
// kernel lacks is left out).
func kernelSettings() string {
	var lines []string
	for _, name := range KernelSettings {
		if b, err := os.ReadFile(filepath.Join(sysctlDir, strings.ReplaceAll(name, ".", "/"))); err == nil {
			lines = append(lines, name+"="+strings.TrimSpace(string(b)))
		}
	}
	return strings.Join(lines, "\n")
}

// defaultQdiscs are the kinds the kernel gives links by itself.
var defaultQdiscs = []string{"noqueue", "pfifo_fast", "mq", "fq_codel", "pfifo", "bfifo"}

// shapingQdiscs lists the host's qdiscs that are not a kernel default ("" without tc).
func shapingQdiscs() (string, error) {
	path, err := exec.LookPath("tc")
	if err != nil {
		return "", nil
	}
	out, err := exec.Command(path, "qdisc", "show").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("tc qdisc show: %w: %s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "qdisc" && !slices.Contains(defaultQdiscs, f[1]) {
			lines = append(lines, l)
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

func iptablesSave() (string, error) {
	out, err := commandLines("iptables-save")
	var lines []string
	for _, l := range out {
		if !strings.HasPrefix(l, "#") {
			lines = append(lines, counters.ReplaceAllString(l, "[0:0]"))
		}
	}
	return strings.Join(lines, "\n"), err
}

func nftTables() (string, error) {
	lines, err := commandLines("nft", "list", "tables")
	sort.Strings(lines)
	return strings.Join(lines, "\n"), err
}

// commandLines runs a host program and returns the non-empty lines of its output: none, and no
// error, when the program is not installed.
func commandLines(name string, args ...string) ([]string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return nil, nil
	}
	out, err := exec.Command(path, args...).Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(append([]string{name}, args...), " "), err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	return lines, nil
}

// netnsNames lists `ip netns list`, and the files of /run/netns (which `ip netns` may not list
// when a stale one is left).
func netnsNames() ([]string, error) {
	set := map[string]bool{}
	if entries, err := os.ReadDir(netnsDir); err == nil {
		for _, e := range entries {
			set[e.Name()] = true
		}
	}
	if ip, err := exec.LookPath("ip"); err == nil {
		out, err := exec.Command(ip, "netns", "list").CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("ip netns list: %w: %s", err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) > 0 {
				set[f[0]] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

// linkNames lists the host's interfaces (`ip -o link`, names without "@peer").
func linkNames() ([]string, error) {
	out, err := exec.Command("ip", "-o", "link").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ip -o link: %w: %s", err, out)
	}
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		n := strings.TrimSuffix(f[1], ":")
		if i := strings.IndexByte(n, '@'); i >= 0 {
			n = n[:i]
		}
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// CgroupHierarchies lists the mount points of the cgroup file systems.
func CgroupHierarchies() ([]string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	return mountinfo.CgroupPoints(mounts), nil
}

// cgroupTops lists "<hierarchy>/<top-level cgroup>" for every hierarchy.
func cgroupTops() ([]string, error) {
	hier, err := CgroupHierarchies()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, h := range hier {
		entries, err := os.ReadDir(h)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() {
				out = append(out, filepath.Join(h, e.Name()))
			}
		}
	}
	sort.Strings(out)
	return out, nil
}

func mountPoints() ([]string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Point)
	}
	sort.Strings(out)
	return out, nil
}

// processesUnder lists processes whose command line has a path under one of dirs, or whose
// working directory is under one (a script's child started with a relative path names none).
func processesUnder(dirs []string) ([]string, error) {
	if len(dirs) == 0 {
		return nil, nil
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []string
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(cmdline) == 0 {
			continue
		}
		if st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat")); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue // a zombie holds nothing
			}
		}
		cwd, _ := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		named := under(cwd, dirs)
		for _, arg := range bytes.Split(cmdline, []byte{0}) {
			a := string(arg)
			if i := strings.IndexByte(a, '='); i >= 0 && strings.HasPrefix(a, "-") {
				a = a[i+1:]
			}
			named = named || under(a, dirs)
		}
		if named {
			out = append(out, fmt.Sprintf("process %d (cwd %s): %s", pid, cwd, strings.ReplaceAll(strings.TrimRight(string(cmdline), "\x00"), "\x00", " ")))
		}
	}
	return out, nil
}

// CgroupPIDs returns the pids in the cgroup subtree root (e.g. "/herd-<instance>") of every
// hierarchy: every process of a local instance.
func CgroupPIDs(root string) ([]int, error) {
	hier, err := CgroupHierarchies()
	if err != nil {
		return nil, err
	}
	set := map[int]bool{}
	for _, h := range hier {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			f, err := os.Open(filepath.Join(p, "cgroup.procs"))
			if err != nil {
				return nil
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if pid, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
					set[pid] = true
				}
			}
			return nil
		})
	}
	return slices.Sorted(maps.Keys(set)), nil
}
