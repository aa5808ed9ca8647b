package upstream

import (
	"slices"
	"testing"
)

func TestNodeComponentsSeparateWithoutTheCombinedBinary(t *testing.T) {
	b := binaries{controllerManager: "/b/kcm", scheduler: "/b/ks", kubelet: "/b/kubelet", kubeProxy: "/b/kp"}
	got := nodeComponents(b, testNode())
	var names []string
	for _, s := range got {
		names = append(names, s.Name)
	}
	if want := []string{"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}; !slices.Equal(names, want) {
		t.Errorf("processes = %v, want %v", names, want)
	}
}

func TestNodeComponentsInOneProcess(t *testing.T) {
	c := testNode()
	b := binaries{controllerManager: "/b/kcm", scheduler: "/b/ks", kubelet: "/b/kubelet", kubeProxy: "/b/kp", combined: "/b/kube-combined"}
	got := nodeComponents(b, c)
	var one *int
	for i, s := range got {
		if s.Name == combinedName {
			one = &i
		} else if slices.Contains(combinedComponents, s.Name) {
			t.Errorf("%s runs in a process of its own although it is one of the combined components", s.Name)
		}
	}
	if len(combinedComponents) == 0 {
		if one != nil {
			t.Error("a kube-combined process with no component")
		}
		return
	}
	if one == nil {
		t.Fatalf("no %s process among %d", combinedName, len(got))
	}
	s := got[*one]
	if s.Path != "/b/kube-combined" {
		t.Errorf("path = %q, want the combined binary", s.Path)
	}
	// Each component's group: its name, then exactly the flags it takes as a binary of its own.
	flags := map[string][]string{
		"kube-controller-manager": controllerManagerArgs(c),
		"kube-scheduler":          schedulerArgs(c),
		"kubelet":                 kubeletArgs(c),
		"kube-proxy":              kubeProxyArgs(c),
	}
	var want []string
	for i, name := range combinedComponents {
		if i > 0 {
			want = append(want, "--")
		}
		want = append(want, name)
		want = append(want, flags[name]...)
	}
	if !slices.Equal(s.Args, want) {
		t.Errorf("args =\n%q\nwant\n%q", s.Args, want)
	}
	for _, a := range s.Args {
		if a == "--" {
			continue
		}
		if _, isName := flags[a]; !isName && len(a) > 0 && a[0] != '-' {
			t.Errorf("argument %q is neither a component's name nor a flag: groups would be split wrongly", a)
		}
	}
}
