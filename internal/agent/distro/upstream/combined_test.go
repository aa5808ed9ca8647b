package upstream

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"herd.dev/herd/internal/kubebin"

	"herd.dev/herd/internal/agent/proc"
)

func names(specs []proc.Spec) []string {
	var n []string
	for _, s := range specs {
		n = append(n, s.Name)
	}
	return n
}

func testBinaries() binaries {
	return binaries{containerd: "/b/containerd", etcd: "/b/etcd", apiserver: "/b/kas", controllerManager: "/b/kcm",
		scheduler: "/b/ks", kubelet: "/b/kubelet", kubeProxy: "/b/kp"}
}

func TestProcessesSeparateWithoutTheCombinedBinary(t *testing.T) {
	first, rest := processes(testBinaries(), testNode())
	if got, want := names(first), []string{"containerd", "etcd", "kube-apiserver"}; !slices.Equal(got, want) {
		t.Errorf("first = %v, want %v", got, want)
	}
	if got, want := names(rest), []string{"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}; !slices.Equal(got, want) {
		t.Errorf("rest = %v, want %v", got, want)
	}
}

// flagsOf are the flags each component takes, as a binary of its own or in kube-combined.
func flagsOf(c nodeConfig) map[string][]string {
	return map[string][]string{
		"kube-apiserver":          apiServerArgs(c),
		"kube-controller-manager": controllerManagerArgs(c),
		"kube-scheduler":          schedulerArgs(c),
		"kubelet":                 kubeletArgs(c),
		"kube-proxy":              kubeProxyArgs(c),
		"metrics-server":          metricsServerArgs(c),
	}
}

func TestProcessesInOneProcess(t *testing.T) {
	for _, together := range [][]string{
		{"kube-controller-manager", "kube-scheduler"},
		{"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"},
		{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"},
		{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "metrics-server"},
	} {
		t.Run(strings.Join(together, ","), func(t *testing.T) {
			saved := combinedComponents
			t.Cleanup(func() { combinedComponents = saved })
			combinedComponents = together
			c := testNode()
			// The node runs metrics-server when its image has the metrics add-on.
			c.metrics = slices.Contains(together, "metrics-server")
			components := 7
			if c.metrics {
				components++
			}
			b := testBinaries()
			b.combined = "/b/kube-combined"
			first, rest := processes(b, c)
			all := append(slices.Clone(first), rest...)
			for _, s := range all {
				if slices.Contains(together, s.Name) {
					t.Errorf("%s runs in a process of its own although it is one of the combined components", s.Name)
				}
			}
			// Every component runs somewhere, once.
			i := slices.IndexFunc(all, func(s proc.Spec) bool { return s.Name == combinedName })
			if i < 0 {
				t.Fatalf("no %s process among %v", combinedName, names(all))
			}
			if n := len(all) + len(together) - 1; n != components {
				t.Errorf("%d processes and %d components in one: %d, want containerd, etcd and %d components", len(all), len(together), n, components-2)
			}
			s := all[i]
			if s.Path != "/b/kube-combined" {
				t.Errorf("path = %q, want the combined binary", s.Path)
			}
			// With the API server inside, kube-combined starts with containerd and etcd and starts
			// the others itself when the API server is ready; otherwise once it is ready.
			apiInside := slices.Contains(together, "kube-apiserver")
			if inFirst := slices.ContainsFunc(first, func(p proc.Spec) bool { return p.Name == combinedName }); inFirst != apiInside {
				t.Errorf("kube-combined started at once = %v, want %v (the API server is one of its components: %v)", inFirst, apiInside, apiInside)
			}
			// Each component's group: its name, then exactly the flags it takes as a binary of
			// its own.
			var want []string
			if apiInside {
				want = append(want, "--start-after-ready="+c.l.kubeconfig("controller-manager"))
			}
			flags := flagsOf(c)
			for i, name := range together {
				if i > 0 {
					want = append(want, "--")
				}
				want = append(want, name)
				want = append(want, flags[name]...)
			}
			if !slices.Equal(s.Args, want) {
				t.Errorf("args =\n%q\nwant\n%q", s.Args, want)
			}
		})
	}
}

// kube-combined splits its command line at "--" and takes a group's first word as a component's
// name: no flag of a component may be a bare "--" or a word of its own.
func TestComponentFlagsAreAllFlags(t *testing.T) {
	for name, flags := range flagsOf(testNode()) {
		for _, f := range flags {
			if f == "--" || !strings.HasPrefix(f, "--") || !strings.Contains(f, "=") {
				t.Errorf("%s: argument %q is not a --flag=value: kube-combined would split its groups wrongly", name, f)
			}
		}
	}
}

// A machine's disk carries kube-combined and none of the components' own binaries: they are
// not looked for when kube-combined runs them all.
func TestFindBinariesWithTheCombinedBinaryAlone(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HERD_CACHE_DIR", cache)
	bin := filepath.Join(cache, "kubernetes", kubebin.Version, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, combinedName), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := findBinaries(true)
	for _, c := range combinedComponents {
		if err != nil && strings.Contains(err.Error(), c) {
			t.Errorf("findBinaries wants %s although kube-combined runs it: %v", c, err)
		}
	}
	if want := filepath.Join(bin, combinedName); b.combined != want {
		t.Errorf("combined = %q, want %q", b.combined, want)
	}

	// Without kube-combined, every component's own binary is wanted (but cluster DNS's, which
	// has none: Start refuses it without kube-combined).
	if err := os.Remove(filepath.Join(bin, combinedName)); err != nil {
		t.Fatal(err)
	}
	_, err = findBinaries(false)
	for _, c := range combinedComponents {
		if c == "metrics-server" || c == dnsComponent {
			continue // no binary of its own, and not wanted without the add-on it serves
		}
		if err == nil || !strings.Contains(err.Error(), c) {
			t.Errorf("findBinaries without kube-combined or %s: error %v, want one naming %s", c, err, c)
		}
	}
	if err != nil && strings.Contains(err.Error(), combinedName) {
		t.Errorf("findBinaries without the metrics add-on wants %s: %v", combinedName, err)
	}
	// metrics-server runs in kube-combined only.
	if _, err = findBinaries(true); err == nil || !strings.Contains(err.Error(), "metrics add-on runs in "+combinedName) {
		t.Errorf("findBinaries with the metrics add-on and no kube-combined: error %v, want one naming %s", err, combinedName)
	}
}

// On a warm store, kube-combined is told so right after the API server it waits for: its other
// components then do not wait for the hooks that write what the store holds.
func TestProcessesOnAWarmStore(t *testing.T) {
	b := testBinaries()
	b.combined = "/b/kube-combined"
	for _, warm := range []bool{false, true} {
		c := testNode()
		c.warm = warm
		first, _ := processes(b, c)
		i := slices.IndexFunc(first, func(s proc.Spec) bool { return s.Name == combinedName })
		if i < 0 {
			t.Fatalf("no %s process among %v", combinedName, names(first))
		}
		args := first[i].Args
		if got := slices.Contains(args, "--bootstrapped"); got != warm || (warm && args[1] != "--bootstrapped") {
			t.Errorf("warm store %v: args %q, want --bootstrapped second: %v", warm, args[:3], warm)
		}
	}
}

// etcd and containerd, which idle most, run Go's scheduler on one processor; kube-combined,
// whose start is the instance's, keeps every core.
func TestOnlyTheQuietComponentsRunOnOneProcessor(t *testing.T) {
	for name, want := range map[string]bool{"etcd": true, "containerd": true, combinedName: false, "kubelet": false} {
		if got := slices.Contains(componentEnv(name), "GOMAXPROCS=1"); got != want {
			t.Errorf("%s: GOMAXPROCS=1 in %q is %v, want %v", name, componentEnv(name), got, want)
		}
		if !slices.Contains(componentEnv(name), "GOGC="+gogc(name)) {
			t.Errorf("%s: %q lacks GOGC=%s", name, componentEnv(name), gogc(name))
		}
	}
}

// The components that write iptables rules write IPv4 ones only, wherever they run.
func TestOnlyTheRuleWritersAreIPv4Only(t *testing.T) {
	for name, want := range map[string]bool{combinedName: true, "kubelet": true, "kube-proxy": true, "kube-apiserver": false, "etcd": false, "containerd": false} {
		if got := slices.Contains(componentEnv(name), "KUBE_IPTABLES_IPV4_ONLY=true"); got != want {
			t.Errorf("%s: KUBE_IPTABLES_IPV4_ONLY=true in %q is %v, want %v", name, componentEnv(name), got, want)
		}
	}
}
