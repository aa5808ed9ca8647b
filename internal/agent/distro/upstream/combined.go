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
// are counted once. docs/benchmarks.md ("One process for the components") has what each
// component saved.
var combinedComponents = []string{"kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}

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

// nodeComponents are the processes that run the components started once the API server is
// ready: one process each, or, when the combined binary is built, one kube-combined process
// running those of combinedComponents and one process for each other.
func nodeComponents(b binaries, c nodeConfig) []proc.Spec {
	all := []proc.Spec{
		{Name: "kube-controller-manager", Path: b.controllerManager, Args: controllerManagerArgs(c)},
		{Name: "kube-scheduler", Path: b.scheduler, Args: schedulerArgs(c)},
		{Name: "kubelet", Path: b.kubelet, Args: kubeletArgs(c)},
		{Name: "kube-proxy", Path: b.kubeProxy, Args: kubeProxyArgs(c)},
	}
	if b.combined == "" {
		return all
	}
	var separate, together []proc.Spec
	for _, s := range all {
		if slices.Contains(combinedComponents, s.Name) {
			together = append(together, s)
		} else {
			separate = append(separate, s)
		}
	}
	if len(together) == 0 {
		return separate
	}
	return append(separate, proc.Spec{Name: combinedName, Path: b.combined, Args: combinedArgs(together)})
}
