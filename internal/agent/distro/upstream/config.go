package upstream

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"herd.dev/herd/internal/agent/distro"
)

// Network ranges inside an instance. They live in the instance's own network namespace, so every
// instance uses the same ones; the instance's own address must be outside both.
var (
	// PodCIDR is the range pods get their addresses from (CNI bridge cni0 inside the instance).
	PodCIDR = netip.MustParsePrefix("10.214.0.0/24")
	// ServiceCIDR is the range of Service cluster IPs.
	ServiceCIDR = netip.MustParsePrefix("10.215.0.0/24")
)

// podBridge is the bridge the CNI plugin plugs every pod into, and the pods' gateway.
const podBridge = "cni0"

// Ports inside the instance. Only the API server and the kubelet listen on the instance address.
const (
	APIServerPort = 6443
	KubeletPort   = 10250
	etcdClientURL = "http://127.0.0.1:2379"
	etcdPeerURL   = "http://127.0.0.1:2380"
)

// componentGOGC is the GOGC of every Go component: the garbage collector runs at 25% heap growth
// instead of 100%, trading a little CPU for a smaller heap. Measured on one instance with the hello
// workload, idle: RSS sum 659 MB at 100 (the default), 636 MB at 25 (kube-apiserver alone 225 ->
// 208 MB); idle CPU and boot time unchanged within noise.
const componentGOGC = "25"

// combinedGOGC is kube-combined's GOGC, the same as the other components'. At 15 (its value
// while the API server built its OpenAPI documents before serving, a live heap of about 90 MB)
// its heap goal was 11 MB lower than at 25. With the documents built when first read, the idle
// live heap is about 63 MB, and 15 collected it twice as often for a few MB: measured on one idle
// instance each over 150 s, 8 collections against 4 and 5 at 25 (each marks the whole live heap;
// a CPU profile put the collector at 12% of kube-combined's idle CPU at 15), heap goal 72.7
// against 78-79 MB, kube-combined's own memory 98.9 against 102-106 MB. 50 took 2 collections
// for a heap goal of 96 MB: not taken (docs/benchmarks/instance.md). kube-combined runs its
// first seconds, the node's boot, at a higher GOGC of its own (hack/kubernetes/combined/bootgc.go).
const combinedGOGC = "25"

// gogc is the GOGC of the process called name.
func gogc(name string) string {
	if name == combinedName {
		return combinedGOGC
	}
	return componentGOGC
}

// oneThreadRuntimes are the components that run Go's scheduler on one processor (GOMAXPROCS=1).
// They need little CPU, and an idle instance's CPU is mostly wakeups: with a second processor,
// each goroutine one of them readies (a raft tick handed from etcd's node loop to its server
// loop, a CRI call from the kubelet served by containerd) wakes another thread to run it. Their
// blocking system calls (etcd's fsync) still hand the processor on.
var oneThreadRuntimes = map[string]bool{"etcd": true, "containerd": true}

// ipv4OnlyRuntimes are the components that write packet rules: kube-proxy (nftables, and
// iptables to look for an earlier mode's leftovers) and the kubelet (iptables, which its
// configuration turns off), on their own or in kube-combined. The instance's cluster is IPv4
// only, and with KUBE_IPTABLES_IPV4_ONLY (hack/kubernetes/patches/iptables-ipv4-only.patch and
// nftables-ipv4-only.patch) they write and read no IPv6 rules, which no packet could match.
var ipv4OnlyRuntimes = map[string]bool{"kubelet": true, "kube-proxy": true, combinedName: true}

// componentEnv is the environment of the process called name: its Go runtime's, and
// KUBE_IPTABLES_IPV4_ONLY where it writes packet rules.
func componentEnv(name string) []string {
	env := []string{"GOGC=" + gogc(name)}
	if oneThreadRuntimes[name] {
		env = append(env, "GOMAXPROCS=1")
	}
	if ipv4OnlyRuntimes[name] {
		env = append(env, "KUBE_IPTABLES_IPV4_ONLY=true")
	}
	return env
}

// Inside the instance's mount namespace, the state dir's containerd and kubelet directories are
// bind-mounted on short paths (see privateRuntimeDirs): the paths of their unix sockets must fit
// in a socket address (107 bytes), which a long state dir would not.
const (
	containerdAlias = "/run/containerd/herd"
	kubeletRootDir  = "/var/lib/kubelet"
)

// ContainerdNamespace is the containerd namespace of the CRI plugin, where the kubelet sees
// images.
const ContainerdNamespace = "k8s.io"

// ContainerdRoot is containerd's root directory (its content store, metadata and snapshots)
// under a node's state directory: where a disk image puts the images it unpacks at build time.
func ContainerdRoot(stateDir string) string {
	return layout{state: stateDir}.containerdRoot()
}

// layout is where everything of one node lives under the state directory.
type layout struct {
	state string
}

func (l layout) path(elem ...string) string {
	return filepath.Join(append([]string{l.state}, elem...)...)
}

func (l layout) pki(name string) string        { return l.path("pki", name) }
func (l layout) kubeconfig(name string) string { return l.path("kubeconfigs", name+".kubeconfig") }
func (l layout) config(name string) string     { return l.path("config", name) }
func (l layout) logs() string                  { return l.path("logs") }
func (l layout) containerdSocket() string      { return containerdAlias + "/containerd.sock" }
func (l layout) containerdRoot() string        { return l.path("containerd", "root") }
func (l layout) etcdData() string              { return l.path("etcd") }
func (l layout) cniConfDir() string            { return l.path("cni", "net.d") }

// dirs are the directories to create (mode 0700) before anything starts.
func (l layout) dirs() []string {
	return []string{
		l.path("pki"), l.path("kubeconfigs"), l.path("config"), l.logs(),
		l.containerdRoot(), l.path("containerd", "state"), l.path("containerd", "opt"),
		l.etcdData(), l.path("kubelet"), l.path("kubelet-plugins"), l.path("pod-logs"),
		l.path("manifests"), l.path("flexvolume"), l.cniConfDir(), l.path("cni", "networks"),
	}
}

// nodeConfig is what the rendering functions need to know about the node.
type nodeConfig struct {
	name       string
	address    netip.Addr
	cgroupRoot string
	pauseImage string
	clusterDNS netip.Addr        // invalid: no cluster DNS
	stubZones  []distro.StubZone // the spec's StubZones: the Corefile forwards them
	metrics    bool              // the spec's ResourceMetrics: kube-combined runs metrics-server
	patient    bool              // the spec's Patient: patientArgs are added
	warm       bool              // the store starts from a warm store (spec.WarmStore)
	l          layout
}

// patientArgs are the flags of a Patient node, by component: longer bounds where a default
// assumes a responsive machine. The API server's checks of etcd (2 s by default) fail its
// /readyz, and so hold the boot back, while a starved etcd is slower than that; the node
// lifecycle controller marks the node NotReady, and taints it, when the kubelet's lease is older
// than its grace period (under a minute by default).
var patientArgs = map[string][]string{
	"kube-apiserver":          {"--etcd-healthcheck-timeout=30s", "--etcd-readycheck-timeout=30s"},
	"kube-controller-manager": {"--node-monitor-grace-period=5m"},
}

// withPatience adds a component's patientArgs to args when the node is Patient.
func (c nodeConfig) withPatience(component string, args []string) []string {
	if !c.patient {
		return args
	}
	return append(args, patientArgs[component]...)
}

// ShimGroupAnnotation is the pod annotation whose value names the containerd shim that runs the
// pod's sandbox and containers: pods with the same value share one shim process (13-14 MB of
// RSS each, most of it the binary's pages, counted once per process), instead of one per pod.
// containerd's runc shim groups containers by it before the pod's sandbox id, and the CRI plugin
// copies it from the pod into the specs (pod_annotations). Shims are per instance: their sockets
// are in the instance's private /run/containerd.
const ShimGroupAnnotation = "io.containerd.runc.v2.group"

// tomlString quotes s as a TOML basic string.
func tomlString(s string) string {
	return strconv.Quote(s)
}

// containerdConfig renders containerd's config.toml: its own root, state, socket and opt
// directory under the state dir; the CRI plugin with the baked pause image, overlayfs and runc
// with cgroupfs; restrict_oom_score_adj (the agent may lack CAP_SYS_RESOURCE, without which
// every sandbox fails); pod network namespaces under the state dir; Debian's CNI plugin path;
// ShimGroupAnnotation passed from pods to their sandboxes' and containers' specs.
func containerdConfig(c nodeConfig) string {
	q := tomlString
	return fmt.Sprintf(`version = 2
root = %s
state = %s
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %s

[plugins."io.containerd.internal.v1.opt"]
  path = %s

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %s
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  enable_cdi = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      pod_annotations = [%s]
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %s
    max_conf_num = 1
`, q(c.l.containerdRoot()), q(c.l.path("containerd", "state")), q(c.l.containerdSocket()),
		q(c.l.path("containerd", "opt")), q(c.pauseImage), q(ShimGroupAnnotation), q(c.l.cniConfDir()))
}

// cniConfig renders the CNI network list: a bridge (cni0) with host-local IPAM keeping its
// allocations in the state dir, and portmap. The bridge plugin does not masquerade (ipMasq):
// the agent's one rule for the pod range does (masqueradePods). It has no loopback plugin:
// containerd's CRI plugin brings each pod's lo up with a loopback network of its own before
// this list, and the plugin in the list ran a second time for nothing (one more process on
// each pod's way to its sandbox, and on its way out).
func cniConfig(c nodeConfig) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "0.4.0",
		"name":       "herd-" + c.name,
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": podBridge, "isGateway": true, "ipMasq": false, "hairpinMode": true,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": c.l.path("cni", "networks"),
					"ranges":  []any{[]any{map[string]any{"subnet": PodCIDR.String()}}},
					"routes":  []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	return json.MarshalIndent(conf, "", "  ")
}

// kubeletConfig renders the KubeletConfiguration.
func kubeletConfig(c nodeConfig) ([]byte, error) {
	conf := map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               c.cgroupRoot,
		"failSwapOn":               false,
		"staticPodPath":            c.l.path("manifests"),
		"containerRuntimeEndpoint": "unix://" + c.l.containerdSocket(),
		"podLogsDir":               c.l.path("pod-logs"),
		"volumePluginDir":          c.l.path("kubelet-plugins"),
		"address":                  c.address.String(),
		"port":                     KubeletPort,
		"readOnlyPort":             0,
		"healthzBindAddress":       "127.0.0.1",
		"healthzPort":              10248,
		"tlsCertFile":              c.l.pki("kubelet.crt"),
		"tlsPrivateKeyFile":        c.l.pki("kubelet.key"),
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true},
			"x509":      map[string]any{"clientCAFile": c.l.pki("ca.crt")},
		},
		"authorization": map[string]any{"mode": "Webhook"},
		"clusterDomain": "cluster.local",
		"resolvConf":    "/etc/resolv.conf",
		"evictionHard": map[string]any{
			"memory.available":  "100Mi",
			"nodefs.available":  "5%",
			"imagefs.available": "5%",
		},
		// No image garbage collection. The images are the bundle's, unpacked into the
		// instance's store before it boots, and no registry is there to pull one back: the
		// kubelet measures the host's disk, which other programs fill, and collected the
		// sandbox (pause) image when it passed 85%, after which no pod could start. containerd
		// 1.6 does not report the sandbox image as pinned, so the kubelet does not spare it.
		"imageGCHighThresholdPercent": 100,
		// No KUBE-FIREWALL, hint or canary chains of the kubelet's: the one rule they carry
		// drops packets to 127.0.0.0/8 from elsewhere, against kube-proxy's iptables mode
		// setting route_localnet for NodePorts on localhost, which the nftables mode
		// (kubeProxyConfig) does not. Writing and then watching them took about a dozen
		// iptables processes at each boot, and 3 a minute after.
		"makeIPTablesUtilChains": false,
	}
	if c.cgroupRoot == "" {
		delete(conf, "cgroupRoot")
	}
	if c.patient {
		// The runtime's calls (a pod's sandbox, a container's start) take minutes, not seconds,
		// on a starved machine; the default bound is 2 minutes.
		conf["runtimeRequestTimeout"] = "10m"
	}
	if c.clusterDNS.IsValid() {
		conf["clusterDNS"] = []string{c.clusterDNS.String()}
	}
	return yaml.Marshal(conf)
}

// kubeProxyConfig renders the KubeProxyConfiguration: nftables mode, NodePorts on the instance
// address only, rules rewritten promptly (minSyncPeriod), and conntrack settings at zero so that kube-proxy leaves the host-wide conntrack
// table size and timeouts alone.
//
// nftables rather than iptables: in iptables mode each full sync of the rules started about 25
// iptables processes (each reading the whole ruleset as it starts), and kube-proxy synced
// several times while the node booted, on the two cores that the boot keeps busy; in nftables
// mode a sync is one listing and one transaction of nft (and, on a full sync, a read of each of
// its maps and sets that the listing names: hack/kubernetes/patches/nftables-sync-read-listed.patch).
func kubeProxyConfig(c nodeConfig) ([]byte, error) {
	conf := map[string]any{
		"apiVersion":         "kubeproxy.config.k8s.io/v1alpha1",
		"kind":               "KubeProxyConfiguration",
		"clientConnection":   map[string]any{"kubeconfig": c.l.kubeconfig("kube-proxy")},
		"hostnameOverride":   c.name,
		"mode":               "nftables",
		"clusterCIDR":        PodCIDR.String(),
		"nodePortAddresses":  []string{netip.PrefixFrom(c.address, c.address.BitLen()).String()},
		"bindAddress":        c.address.String(),
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		// kube-proxy rewrites its rules at most once per minSyncPeriod after its first two
		// changes in a row (1 s by default). At boot every Service's endpoints become ready
		// within a second or two of each other, so the workload's could wait most of a second
		// behind the add-ons'; one node's few rules are rewritten in milliseconds.
		"nftables": map[string]any{"minSyncPeriod": "100ms"},
		"conntrack": map[string]any{
			"maxPerCore":            0,
			"min":                   0,
			"tcpEstablishedTimeout": "0s",
			"tcpCloseWaitTimeout":   "0s",
		},
	}
	return yaml.Marshal(conf)
}

// endpointSliceBatch is how long the EndpointSlice controller gathers a Service's pods' changes
// before it writes (controllerManagerArgs). A starting pod's two status writes (running, then
// ready once its first probe passes) came 8-30 ms apart in the boots measured: one batch holds
// both. It is also how long a new pod's readiness waits before its endpoint is written, which
// kube-proxy and so the app's first answer wait for: 200 ms, its first value, was most of the
// time from the pod's readiness to that answer.
const endpointSliceBatch = 50 * time.Millisecond

// etcdArgs are etcd's flags: loopback only, a small in-memory raft log.
func etcdArgs(c nodeConfig) []string {
	return []string{
		"--name=" + c.name,
		"--data-dir=" + c.l.etcdData(),
		"--listen-client-urls=" + etcdClientURL,
		"--advertise-client-urls=" + etcdClientURL,
		"--listen-peer-urls=" + etcdPeerURL,
		"--initial-advertise-peer-urls=" + etcdPeerURL,
		"--initial-cluster=" + c.name + "=" + etcdPeerURL,
		"--listen-metrics-urls=",
		// A single member elects itself once its randomized election timeout has passed; etcd
		// advances all of its election ticks but one at start, so the wait is 1 to 10 ticks of
		// the heartbeat interval at the default timeout of 10 (1 s), and the API server's start
		// waits on it. Five (the least etcd allows) makes it 1 to 5, without ticking more often.
		"--election-timeout=500",
		// The raft log kept in memory between snapshots grows by one entry per write (a lease
		// renewal every few seconds); the default of 100,000 entries is tens of MB after a day.
		"--snapshot-count=10000",
		// The backend (bbolt) commits what was applied every second instead of every 100 ms:
		// its loop woke etcd ten times a second with nothing to commit while the instance idles.
		// A write is durable once in the write-ahead log, before it is applied, and visible to
		// reads before the commit; after a crash etcd replays the log from the last commit.
		"--backend-batch-interval=1s",
	}
}

// frontProxyClientName is the common name of the API server's certificate for the aggregation
// layer, the one name extension API servers accept request headers from.
const frontProxyClientName = "front-proxy-client"

// firstServiceIP is the cluster IP of the "kubernetes" Service: the first address of the range.
func firstServiceIP() netip.Addr {
	return ServiceCIDR.Addr().Next()
}

// apiServerArgs are kube-apiserver's flags.
func apiServerArgs(c nodeConfig) []string {
	p := c.l.pki
	args := []string{
		"--advertise-address=" + c.address.String(),
		"--bind-address=" + c.address.String(),
		"--secure-port=" + strconv.Itoa(APIServerPort),
		"--etcd-servers=" + etcdClientURL,
		"--service-cluster-ip-range=" + ServiceCIDR.String(),
		"--tls-cert-file=" + p("apiserver.crt"),
		"--tls-private-key-file=" + p("apiserver.key"),
		"--client-ca-file=" + p("ca.crt"),
		"--token-auth-file=" + p("tokens.csv"),
		"--kubelet-client-certificate=" + p("kubelet-client.crt"),
		"--kubelet-client-key=" + p("kubelet-client.key"),
		"--kubelet-certificate-authority=" + p("ca.crt"),
		"--kubelet-preferred-address-types=InternalIP",
		// The aggregation layer: who may forward requests to extension API servers, and with
		// which headers. Aggregator routing sends them to the endpoint, not the Service IP, so
		// that it does not wait for kube-proxy.
		"--requestheader-client-ca-file=" + p("front-proxy-ca.crt"),
		"--requestheader-allowed-names=" + frontProxyClientName,
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + p("front-proxy-client.crt"),
		"--proxy-client-key-file=" + p("front-proxy-client.key"),
		"--enable-aggregator-routing=true",
		// One API server: the kubernetes Service's endpoint is its own address, which the
		// master-count reconciler (of --apiserver-count=1, the default) checks every 10 s with a
		// read of the Endpoints and one of the EndpointSlice. The default (lease) reconciler,
		// there for API servers that share the Service, also reads, lists and rewrites a lease of
		// its own in etcd every 10 s: 45 of an idle instance's 207 etcd requests in 150 s, and a
		// third of its writes. Upstream deprecates master-count; when it goes, lease it is.
		"--endpoint-reconciler-type=master-count",
		// No identity lease: each API server renews one every 10 s so that API servers sharing a
		// store can tell each other's versions apart (storage versions, the mixed-version proxy,
		// both off in this release). An instance's one API server has no peer to tell: the
		// renewals were 15 of an idle instance's 45 writes to etcd in 150 s.
		"--feature-gates=APIServerIdentity=false",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p("sa.pub"),
		"--service-account-signing-key-file=" + p("sa.key"),
		"--authorization-mode=Node,RBAC",
		"--allow-privileged=true",
		"--profiling=false",
		// No count of every resource's objects in etcd each minute (a read of etcd per
		// resource: 78 of an idle instance's 125 etcd requests in 150 s). The counts feed a
		// metric and API Priority and Fairness' estimate of a list's cost: without them a list
		// is estimated at the fewest seats, as a one-node cluster's small lists are.
		"--etcd-count-metric-poll-period=0",
	}
	return c.withPatience("kube-apiserver", args)
}

// controllerManagerArgs are kube-controller-manager's flags.
func controllerManagerArgs(c nodeConfig) []string {
	p := c.l.pki
	args := []string{
		"--kubeconfig=" + c.l.kubeconfig("controller-manager"),
		"--leader-elect=false",
		"--secure-port=0",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file=" + p("sa.key"),
		"--root-ca-file=" + p("ca.crt"),
		"--cluster-signing-cert-file=" + p("ca.crt"),
		"--cluster-signing-key-file=" + p("ca.key"),
		"--flex-volume-plugin-dir=" + c.l.path("flexvolume"),
		// At the default 20 qps, starting the controllers (each with its own service account)
		// delays the default service account, which every pod needs, by seconds.
		"--kube-api-qps=200",
		"--kube-api-burst=300",
		// A pod's start changes it twice within milliseconds (its address, then its readiness
		// once the first probe passes). Synced at once, the second sync found the controller's
		// own write of the first not yet in its cache, failed ("EndpointSlice informer cache is
		// out of date") and was retried a second later: the workload's endpoint, and so its
		// first answer through its Service, came a second late. Batched, both make one write;
		// a change after the batch syncs at least a batch after the write, which the
		// controller's cache has seen by then.
		"--endpointslice-updates-batch-period=" + endpointSliceBatch.String(),
		"--profiling=false",
	}
	return c.withPatience("kube-controller-manager", args)
}

// schedulerArgs are kube-scheduler's flags.
func schedulerArgs(c nodeConfig) []string {
	return []string{
		"--kubeconfig=" + c.l.kubeconfig("scheduler"),
		"--leader-elect=false",
		"--secure-port=0",
		"--profiling=false",
	}
}

// kubeletArgs are the kubelet's flags (the rest is in its config file).
func kubeletArgs(c nodeConfig) []string {
	return []string{
		"--config=" + c.l.config("kubelet.yaml"),
		"--kubeconfig=" + c.l.kubeconfig("kubelet"),
		"--root-dir=" + kubeletRootDir,
		"--hostname-override=" + c.name,
		"--node-ip=" + c.address.String(),
	}
}

// kubeProxyArgs are kube-proxy's flags.
func kubeProxyArgs(c nodeConfig) []string {
	return []string{"--config=" + c.l.config("kube-proxy.yaml")}
}

// user is one identity in the API server's static token file.
type user struct {
	component string // the kubeconfig's name
	name      string
	groups    []string
	token     string
}

// tokensCSV renders the static token file: token,user,uid,"group1,group2".
func tokensCSV(users []user) string {
	var b strings.Builder
	for _, u := range users {
		fmt.Fprintf(&b, "%s,%s,%s", u.token, u.name, u.name)
		if len(u.groups) > 0 {
			fmt.Fprintf(&b, ",%q", strings.Join(u.groups, ","))
		}
		b.WriteByte('\n')
	}
	return b.String()
}
