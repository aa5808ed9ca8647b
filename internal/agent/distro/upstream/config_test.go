package upstream

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"herd.dev/herd/internal/addons"
	"herd.dev/herd/internal/agent/distro"
	"herd.dev/herd/internal/kubebin"
)

func testNode() nodeConfig {
	return nodeConfig{
		name:       "web-1",
		address:    netip.MustParseAddr("10.213.0.10"),
		cgroupRoot: "/herd-web-1",
		pauseImage: "registry.k8s.io/pause:3.10",
		l:          layout{state: "/var/lib/herd/i/web-1/agent"},
	}
}

func TestContainerdConfig(t *testing.T) {
	got := containerdConfig(testNode())
	for _, want := range []string{
		`root = "/var/lib/herd/i/web-1/agent/containerd/root"`,
		`state = "/var/lib/herd/i/web-1/agent/containerd/state"`,
		`address = "/run/containerd/herd/containerd.sock"`,
		`path = "/var/lib/herd/i/web-1/agent/containerd/opt"`,
		`sandbox_image = "registry.k8s.io/pause:3.10"`,
		"restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true",
		`bin_dir = "/usr/lib/cni"`,
		`conf_dir = "/var/lib/herd/i/web-1/agent/cni/net.d"`,
		"SystemdCgroup = false",
		`pod_annotations = ["io.containerd.runc.v2.group"]`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, got)
		}
	}
}

func TestCNIConfig(t *testing.T) {
	data, err := cniConfig(testNode())
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Name    string `json:"name"`
		Plugins []struct {
			Type   string `json:"type"`
			IPMasq *bool  `json:"ipMasq"`
			IPAM   struct {
				DataDir string `json:"dataDir"`
				Ranges  [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	// bridge then portmap; no loopback, which containerd's CRI plugin runs on its own.
	if conf.Name != "herd-web-1" || len(conf.Plugins) != 2 || conf.Plugins[0].Type != "bridge" || conf.Plugins[1].Type != "portmap" {
		t.Fatalf("conf = %+v", conf)
	}
	if conf.Plugins[0].IPAM.DataDir != "/var/lib/herd/i/web-1/agent/cni/networks" || conf.Plugins[0].IPAM.Ranges[0][0].Subnet != "10.214.0.0/24" {
		t.Errorf("ipam = %+v", conf.Plugins[0].IPAM)
	}
	// The agent's one rule masquerades the pods' traffic (masqueradePods), not a chain per pod.
	if m := conf.Plugins[0].IPMasq; m == nil || *m {
		t.Errorf("bridge ipMasq = %v, want false", m)
	}
}

func TestKubeletConfig(t *testing.T) {
	data, err := kubeletConfig(testNode())
	if err != nil {
		t.Fatal(err)
	}
	var conf map[string]any
	if err := yaml.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"kind":                     "KubeletConfiguration",
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               "/herd-web-1",
		"address":                  "10.213.0.10",
		"containerRuntimeEndpoint": "unix:///run/containerd/herd/containerd.sock",
		"podLogsDir":               "/var/lib/herd/i/web-1/agent/pod-logs",
		"volumePluginDir":          "/var/lib/herd/i/web-1/agent/kubelet-plugins",
		"healthzBindAddress":       "127.0.0.1",
		"failSwapOn":               false,
		"readOnlyPort":             float64(0),
		"tlsCertFile":              "/var/lib/herd/i/web-1/agent/pki/kubelet.crt",
		// The bundle's images cannot be pulled again: the kubelet must never collect them.
		"imageGCHighThresholdPercent": float64(100),
		// kube-proxy's nftables mode needs none of the kubelet's iptables chains.
		"makeIPTablesUtilChains": false,
	}
	for k, v := range want {
		if conf[k] != v {
			t.Errorf("%s = %v (%T), want %v", k, conf[k], conf[k], v)
		}
	}
	auth := conf["authentication"].(map[string]any)
	if auth["anonymous"].(map[string]any)["enabled"] != false {
		t.Error("anonymous authentication is not disabled")
	}

	n := testNode()
	n.cgroupRoot = ""
	data, err = kubeletConfig(n)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "cgroupRoot") {
		t.Error("an empty cgroup root is written")
	}
}

func TestKubeProxyConfig(t *testing.T) {
	data, err := kubeProxyConfig(testNode())
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Mode              string   `json:"mode"`
		NodePortAddresses []string `json:"nodePortAddresses"`
		HostnameOverride  string   `json:"hostnameOverride"`
		Conntrack         struct {
			MaxPerCore            *int   `json:"maxPerCore"`
			Min                   *int   `json:"min"`
			TCPEstablishedTimeout string `json:"tcpEstablishedTimeout"`
		} `json:"conntrack"`
		NFTables struct {
			MinSyncPeriod string `json:"minSyncPeriod"`
		} `json:"nftables"`
	}
	if err := yaml.Unmarshal(data, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.Mode != "nftables" || len(conf.NodePortAddresses) != 1 || conf.NodePortAddresses[0] != "10.213.0.10/32" || conf.HostnameOverride != "web-1" {
		t.Errorf("conf = %+v", conf)
	}
	if conf.Conntrack.MaxPerCore == nil || *conf.Conntrack.MaxPerCore != 0 || conf.Conntrack.Min == nil || *conf.Conntrack.Min != 0 || conf.Conntrack.TCPEstablishedTimeout != "0s" {
		t.Errorf("conntrack = %+v: kube-proxy would change the host's conntrack settings", conf.Conntrack)
	}
	if d, err := time.ParseDuration(conf.NFTables.MinSyncPeriod); err != nil || d <= 0 || d >= time.Second {
		t.Errorf("nftables.minSyncPeriod = %q: want a positive period under kube-proxy's default of 1s", conf.NFTables.MinSyncPeriod)
	}
}

func TestComponentArgs(t *testing.T) {
	n := testNode()
	checks := []struct {
		name string
		args []string
		want []string
	}{
		{"kube-apiserver", apiServerArgs(n), []string{
			"--bind-address=10.213.0.10", "--advertise-address=10.213.0.10", "--secure-port=6443",
			"--etcd-servers=http://127.0.0.1:2379", "--service-cluster-ip-range=10.215.0.0/24",
			"--kubelet-preferred-address-types=InternalIP", "--authorization-mode=Node,RBAC",
			"--token-auth-file=/var/lib/herd/i/web-1/agent/pki/tokens.csv", "--etcd-count-metric-poll-period=0",
		}},
		{"kube-controller-manager", controllerManagerArgs(n), []string{"--leader-elect=false", "--kube-api-qps=200", "--kube-api-burst=300",
			"--endpointslice-updates-batch-period=50ms",
			"--flex-volume-plugin-dir=/var/lib/herd/i/web-1/agent/flexvolume"}},
		{"kube-scheduler", schedulerArgs(n), []string{"--leader-elect=false"}},
		{"kubelet", kubeletArgs(n), []string{"--hostname-override=web-1", "--node-ip=10.213.0.10", "--root-dir=/var/lib/kubelet"}},
		{"etcd", etcdArgs(n), []string{"--listen-client-urls=http://127.0.0.1:2379", "--data-dir=/var/lib/herd/i/web-1/agent/etcd", "--initial-cluster=web-1=http://127.0.0.1:2380",
			"--election-timeout=500", "--backend-batch-interval=1s"}},
	}
	for _, c := range checks {
		for _, w := range c.want {
			if !slices.Contains(c.args, w) {
				t.Errorf("%s args lack %s: %v", c.name, w, c.args)
			}
		}
	}
	for _, a := range append(apiServerArgs(n), kubeletArgs(n)...) {
		if strings.Contains(a, "0.0.0.0") {
			t.Errorf("a component listens on every address: %s", a)
		}
	}
}

func TestTokensCSV(t *testing.T) {
	got := tokensCSV([]user{
		{name: "herd-admin", groups: []string{"system:masters"}, token: "t1"},
		{name: "system:node:web-1", groups: []string{"system:nodes", "extra"}, token: "t2"},
		{name: "system:kube-proxy", token: "t3"},
	})
	want := "t1,herd-admin,herd-admin,\"system:masters\"\n" +
		"t2,system:node:web-1,system:node:web-1,\"system:nodes,extra\"\n" +
		"t3,system:kube-proxy,system:kube-proxy\n"
	if got != want {
		t.Errorf("tokens.csv:\n%s\nwant:\n%s", got, want)
	}
}

func TestAccessKubeconfig(t *testing.T) {
	a := distro.Access{Server: "https://10.213.0.10:6443", CAPEM: []byte("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"), Token: "secret"}
	data, err := a.Kubeconfig("herd-admin")
	if err != nil {
		t.Fatal(err)
	}
	var kc struct {
		Clusters []struct {
			Cluster struct {
				Server string `json:"server"`
				CAData []byte `json:"certificate-authority-data"`
			} `json:"cluster"`
		} `json:"clusters"`
		Users []struct {
			Name string `json:"name"`
			User struct {
				Token string `json:"token"`
			} `json:"user"`
		} `json:"users"`
		Current string `json:"current-context"`
	}
	if err := yaml.Unmarshal(data, &kc); err != nil {
		t.Fatal(err)
	}
	if kc.Clusters[0].Cluster.Server != a.Server || string(kc.Clusters[0].Cluster.CAData) != string(a.CAPEM) ||
		kc.Users[0].Name != "herd-admin" || kc.Users[0].User.Token != "secret" || kc.Current != "herd" {
		t.Errorf("kubeconfig = %s", data)
	}
}

func TestValidate(t *testing.T) {
	ok := distro.Spec{Name: "web-1", Address: netip.MustParseAddr("10.213.0.10"), StateDir: "/var/lib/herd/x", PauseImage: "registry.k8s.io/pause:3.10", Version: kubebin.Version}
	if err := validate(ok); err != nil {
		t.Fatalf("valid spec: %v", err)
	}
	tests := []struct {
		name string
		edit func(*distro.Spec)
		want string
	}{
		{"no name", func(s *distro.Spec) { s.Name = "" }, "needs a name"},
		{"ipv6", func(s *distro.Spec) { s.Address = netip.MustParseAddr("fd00::1") }, "want an IPv4 address"},
		{"in pod range", func(s *distro.Spec) { s.Address = netip.MustParseAddr("10.214.0.7") }, "inside the instance's pod range"},
		{"in service range", func(s *distro.Spec) { s.Address = netip.MustParseAddr("10.215.0.9") }, "service range"},
		{"other version", func(s *distro.Spec) { s.Version = "v1.30.0" }, "rebuild the node image"},
		{"no pause image", func(s *distro.Spec) { s.PauseImage = "" }, "no pause image"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			tt.edit(&s)
			err := validate(s)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestClusterDNSIsAFreeServiceAddress: the address node images give the kube-dns Service must be
// in this distribution's Service range, and not the kubernetes Service's.
func TestClusterDNSIsAFreeServiceAddress(t *testing.T) {
	if !ServiceCIDR.Contains(addons.ClusterDNS) || addons.ClusterDNS == firstServiceIP() {
		t.Fatalf("addons.ClusterDNS %s is not a free address of %s", addons.ClusterDNS, ServiceCIDR)
	}
	c := nodeConfig{name: "n", address: netip.MustParseAddr("10.0.0.2"), clusterDNS: addons.ClusterDNS, l: layout{state: "/s"}}
	out, err := kubeletConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "clusterDNS:\n- 10.215.0.10\n") {
		t.Errorf("kubelet config lacks clusterDNS:\n%s", out)
	}
	c.clusterDNS = netip.Addr{}
	if out, _ := kubeletConfig(c); strings.Contains(string(out), "clusterDNS") {
		t.Errorf("kubelet config of an image without DNS names one:\n%s", out)
	}
}

// TestPatientArgs: a Patient node's API server, controller manager and kubelet get the longer
// bounds; a node that is not keeps every default.
func TestPatientArgs(t *testing.T) {
	plain, patient := testNode(), testNode()
	patient.patient = true
	for _, c := range []struct {
		name  string
		args  func(nodeConfig) []string
		wants []string
	}{
		{"kube-apiserver", apiServerArgs, []string{"--etcd-healthcheck-timeout=30s", "--etcd-readycheck-timeout=30s"}},
		{"kube-controller-manager", controllerManagerArgs, []string{"--node-monitor-grace-period=5m"}},
	} {
		for _, want := range c.wants {
			if !slices.Contains(c.args(patient), want) {
				t.Errorf("a patient %s lacks %s", c.name, want)
			}
			flag, _, _ := strings.Cut(want, "=")
			if slices.ContainsFunc(c.args(plain), func(a string) bool { return strings.HasPrefix(a, flag) }) {
				t.Errorf("%s has %s when the node is not patient", c.name, flag)
			}
		}
	}
	for _, n := range []struct {
		c    nodeConfig
		want string
	}{{plain, ""}, {patient, "10m"}} {
		data, err := kubeletConfig(n.c)
		if err != nil {
			t.Fatal(err)
		}
		var conf map[string]any
		if err := yaml.Unmarshal(data, &conf); err != nil {
			t.Fatal(err)
		}
		if got, _ := conf["runtimeRequestTimeout"].(string); got != n.want {
			t.Errorf("patient %v: kubelet's runtimeRequestTimeout %q, want %q", n.c.patient, got, n.want)
		}
	}
}
