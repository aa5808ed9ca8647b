package upstream

import (
	"slices"

	"herd.dev/herd/internal/agent/proc"
)

// combinedName is the combined binary's name in kubebin (built by `make kubernetes` from
// hack/kubernetes/combined) and the name of the process that runs it, in logs and errors.
const combinedName = "kube-combined"

// combinedComponents are the components the node runs in one kube-combined process when that
// binary is built: each component carries its own copy of the same libraries' code and static
// data (client-go, apimachinery, the API schemes), counted once per process; in one process they
// are counted once. docs/benchmarks/instance-history.md ("One process for the components") has what each
// component saved.
// metrics-server and cluster DNS run there only: they have no binary of their own.
var combinedComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy", "metrics-server", dnsComponent}

// combinedArgs is kube-combined's command line for specs: one group per component, its name
// then its flags, groups separated by "--".
func combinedArgs(specs []proc.Spec) []string {
	var args []string
	for i, s := range specs {
		if i > 0 {
			args = append(args, "--")
		}
		args = append(args, s.Name)
		args = append(args, s.Args...)
	}
	return args
}

// processes returns the processes of the node's components: first those started at once
// (containerd, etcd and the API server), then those started once the API server is ready. Each
// component has a process of its own unless the combined binary is built: then those of
// combinedComponents run in one kube-combined process. When the API server is one of them, that
// process starts at once and starts the others itself once the API server is ready.
func processes(b binaries, c nodeConfig) (first, rest []proc.Spec) {
	first = []proc.Spec{
		{Name: "containerd", Path: b.containerd, Args: []string{"--config", c.l.config("containerd.toml")}},
		{Name: "etcd", Path: b.etcd, Args: etcdArgs(c)},
	}
	api := proc.Spec{Name: "kube-apiserver", Path: b.apiserver, Args: apiServerArgs(c)}
	others := []proc.Spec{
		{Name: "kube-controller-manager", Path: b.controllerManager, Args: controllerManagerArgs(c)},
		{Name: "kube-scheduler", Path: b.scheduler, Args: schedulerArgs(c)},
		{Name: "kubelet", Path: b.kubelet, Args: kubeletArgs(c)},
		{Name: "kube-proxy", Path: b.kubeProxy, Args: kubeProxyArgs(c)},
	}
	if c.metrics {
		others = append(others, proc.Spec{Name: "metrics-server", Args: metricsServerArgs(c)})
	}
	if c.clusterDNS.IsValid() {
		// Only kube-combined runs it (Start refuses cluster DNS without it).
		others = append(others, proc.Spec{Name: dnsComponent, Args: dnsArgs(c)})
	}
	if b.combined == "" {
		return append(first, api), others
	}
	var together []proc.Spec
	pick := func(s proc.Spec) bool {
		if slices.Contains(combinedComponents, s.Name) {
			together = append(together, s)
			return true
		}
		return false
	}
	apiTogether := pick(api)
	if !apiTogether {
		first = append(first, api)
	}
	for _, s := range others {
		if !pick(s) {
			rest = append(rest, s)
		}
	}
	switch {
	case len(together) == 0:
	case apiTogether:
		// kube-combined waits for the API server with the controller-manager's credentials; on
		// a warm store, not for the hooks that write what it holds already.
		args := []string{"--start-after-ready=" + c.l.kubeconfig("controller-manager")}
		if c.warm {
			args = append(args, "--bootstrapped")
		}
		args = append(args, combinedArgs(together)...)
		first = append(first, proc.Spec{Name: combinedName, Path: b.combined, Args: args})
	default:
		rest = append(rest, proc.Spec{Name: combinedName, Path: b.combined, Args: combinedArgs(together)})
	}
	return first, rest
}
