// Package distro is the seam between herd's agent and the Kubernetes distribution that runs in an
// instance. The agent core (status, HTTP endpoints, images, manifests, readiness, metrics,
// shutdown) talks only to these interfaces; each distribution lives in its own package:
// upstream (the pinned upstream components and containerd, for local instances), and later k3s
// (for cloud images where k3s is installed). Adding one means a new package and one line in the
// agent's table of distributions, and nothing else.
package distro

import (
	"context"
	"log/slog"
	"net/netip"
	"time"

	"sigs.k8s.io/yaml"
)

// Distro boots the Kubernetes of one node.
type Distro interface {
	// Name is the distribution's name as a NodeImage's spec.kubernetes.distribution gives it.
	Name() string
	// Start checks what the distribution needs (binaries, versions), prepares the state
	// directory (keys, certificates, credentials, configurations) and starts the node's
	// container runtime and Kubernetes components in the order that boots fastest. It returns
	// once the processes are started, without waiting for them to be ready: the Node's channels
	// say when each stage is. An error means nothing is left running.
	Start(ctx context.Context, spec Spec) (Node, error)
}

// Spec is what a distribution is told about the instance it boots.
type Spec struct {
	// Name is the instance's name, also its node name (a DNS label).
	Name string
	// Address is the instance's IP address. The API server and the kubelet listen on it only;
	// everything else listens on loopback.
	Address netip.Addr
	// StateDir holds everything the distribution writes. The agent owns status.json and
	// kubeconfig in it; the distribution must not write those names.
	StateDir string
	// CgroupRoot is the cgroup (in every hierarchy) the instance's processes are confined to, and
	// under which the kubelet puts the pods (e.g. "/herd-web-1"). Empty: the distribution's
	// default.
	CgroupRoot string
	// PauseImage is the sandbox image reference the container runtime must use; the agent
	// imports it with the other images.
	PauseImage string
	// Version is the Kubernetes version the bundle was built for (e.g. "v1.33.13").
	Version string
	// ClusterDNS is the address of the cluster DNS Service the image runs, which the kubelet
	// must give pods as their resolver. Invalid (the zero Addr): the image has no cluster DNS.
	ClusterDNS netip.Addr
	// WarmStore is a directory holding the store the node's control plane starts from on its
	// first boot, made when the image was built with the cluster's bootstrap objects in it
	// (upstream.WarmStore). Empty: the node starts from an empty store.
	WarmStore string
	// StubZones are zones the cluster DNS forwards to servers of their own (herd's discovery
	// zone). Ignored without ClusterDNS.
	StubZones []StubZone
	// ResourceMetrics says that the image has the metrics add-on: the node must serve the
	// metrics.k8s.io API its APIService registers, at the Endpoints of the add-on's Service
	// (kube-system/metrics-server), which has no selector. Default: false (no resource metrics).
	ResourceMetrics bool
	// Patient says that the machine may be starved of CPU (a disk image booted under
	// emulation): the components' health checks get longer bounds than their defaults, which
	// assume a responsive machine.
	Patient bool
	// Logger receives the distribution's progress and warnings.
	Logger *slog.Logger
	// Step records a named boot step in the instance's status (e.g. "etcd healthy"). Never nil.
	Step func(name string)
}

// StubZone is a zone the cluster DNS forwards to a server of its own.
type StubZone struct {
	// Zone is the zone, e.g. "herd.internal." (a trailing dot or none).
	Zone string
	// Server is where its queries go.
	Server netip.AddrPort
	// Cache bounds how long its answers (and NXDOMAINs) are kept.
	Cache time.Duration
}

// Node is a started node.
type Node interface {
	// RuntimeReady is closed when the container runtime answers: images can be imported.
	RuntimeReady() <-chan struct{}
	// APIReady is closed when the API server is ready to serve (its /readyz is 200; on a warm
	// store, but for the checks of the hooks that write what the store holds): manifests can be
	// applied.
	APIReady() <-chan struct{}
	// ImportImage imports a docker-archive image tar, tagged ref, into the container runtime
	// (in the namespace the kubelet uses). Call it only after RuntimeReady.
	ImportImage(ctx context.Context, ref, tarPath string) error
	// Access is how to reach the API server as a cluster administrator.
	Access() Access
	// Failed is closed when a component has exited without Stop being called; Err then
	// returns an error naming it, with the last lines of its log.
	Failed() <-chan struct{}
	// Err returns the failure that closed Failed, or nil.
	Err() error
	// Stop stops every component of the node, the workload's containers' runtime included, in
	// the reverse order of starting, each within a bound, and returns when all have exited. The
	// agent deletes the workload's pods through the API before calling it. Nothing of the node may
	// be left in the host's shared directories then (e.g. the kubelet's /var/log/containers
	// symlinks): the agent does not clean them.
	Stop(ctx context.Context) error
}

// Access is an administrator's credentials for a node's API server. A distribution whose API
// server authenticates administrators otherwise (k3s: client certificates) gives it a static
// token file as well (k3s: --kube-apiserver-arg=token-auth-file=...).
type Access struct {
	// Server is the API server's URL (https://<address>:<port>).
	Server string
	// CAPEM is the PEM certificate of the CA that signed the API server's serving certificate.
	CAPEM []byte
	// Token is a bearer token of a user in system:masters. Secret: never log it.
	Token string
}

// Kubeconfig renders a kubeconfig for these credentials, with the CA embedded, naming the user
// userName. It holds the token: write it with mode 0600.
func (a Access) Kubeconfig(userName string) ([]byte, error) {
	conf := map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{
			"name":    "herd",
			"cluster": map[string]any{"server": a.Server, "certificate-authority-data": a.CAPEM},
		}},
		"users": []any{map[string]any{
			"name": userName,
			"user": map[string]any{"token": a.Token},
		}},
		"contexts": []any{map[string]any{
			"name":    "herd",
			"context": map[string]any{"cluster": "herd", "user": userName},
		}},
		"current-context": "herd",
	}
	return yaml.Marshal(conf)
}
