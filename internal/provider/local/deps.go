package local

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"herd.dev/herd/internal/kubebin"
)

// Host programs a local instance needs, by the command that installs them.
var (
	// depCommands are looked up in PATH; `make deps` (hack/install-deps.sh) installs them.
	depCommands = []string{"nsenter", "iptables", "nft", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "etcd", "conntrack"}
	// depFiles are CNI plugins at Debian's path; `make deps` installs them too.
	depFiles = []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "/usr/lib/cni/portmap"}
	// kubeComponents are the upstream components each instance runs; `make kubernetes` builds them.
	kubeComponents = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kube-proxy"}
)

// CheckHost returns an error naming everything this host lacks to run local instances with the
// given herd binary (root, the Debian packages, the Kubernetes binaries), with the command that
// installs each; nil when nothing is missing. Create runs the same check.
func CheckHost(herdBinary string) error {
	var problems []string
	if os.Geteuid() != 0 {
		problems = append(problems, "the local provider needs root (it creates network namespaces, a bridge and cgroups): run herd up as root")
	}
	var missing []string
	for _, c := range depCommands {
		if _, err := exec.LookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	for _, f := range depFiles {
		if !isExecutable(f) {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("missing %s: install them with make deps (hack/install-deps.sh)", strings.Join(missing, ", ")))
	}
	var kube []string
	for _, c := range kubeComponents {
		if _, err := kubebin.Path(c); err != nil {
			kube = append(kube, c)
		}
	}
	if len(kube) > 0 {
		dir, _ := kubebin.BinDir()
		problems = append(problems, fmt.Sprintf("missing Kubernetes %s %s in %s: build them with make kubernetes", kubebin.Version, strings.Join(kube, ", "), dir))
	}
	if !isExecutable(herdBinary) {
		problems = append(problems, fmt.Sprintf("the herd binary %q is not an executable file: build it with make build", herdBinary))
	}
	if agent := AgentBinary(herdBinary); !isExecutable(agent) {
		problems = append(problems, fmt.Sprintf("the agent binary %q that each instance runs is not an executable file: build it with make build (it builds herd and herd-agent side by side)", agent))
	}
	if _, err := os.Stat("/sys/fs/cgroup"); err != nil {
		problems = append(problems, "no cgroup file system at /sys/fs/cgroup")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		problems = append(problems, "no /dev/net/tun, which carries the links between regions and the internet: use a kernel with TUN (CONFIG_TUN) and create the device (mknod /dev/net/tun c 10 200)")
	}
	if len(problems) > 0 {
		return fmt.Errorf("local provider cannot run instances on this host: %s", strings.Join(problems, "; "))
	}
	return nil
}

// AgentBinary is the herd-agent executable instances run: the one beside the herd binary. It is a
// binary of its own so that each instance's agent does not carry what only herd's other commands
// link (Helm, Kustomize, the image builder); `make build` puts both in bin/.
func AgentBinary(herdBinary string) string {
	return filepath.Join(filepath.Dir(herdBinary), "herd-agent")
}

func isExecutable(path string) bool {
	if path == "" {
		return false
	}
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0
}
