package upstream

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/addons"
	"herd.dev/herd/internal/agent/distro"
)

func dnsNode() nodeConfig {
	c := testNode()
	c.clusterDNS = addons.ClusterDNS
	c.stubZones = []distro.StubZone{{Zone: "herd.internal", Server: netip.MustParseAddrPort("10.213.1.1:5354"), Cache: 5 * time.Second}}
	return c
}

// The Corefile serves cluster.local from the API with the component's kubeconfig and forwards
// the rest to the node's resolvers, on the node's address; a stub zone gets a block of its own
// on the same address, forwarded to its server.
func TestCorefile(t *testing.T) {
	c := dnsNode()
	got := corefile(c)
	for _, want := range []string{
		".:53 {\n    bind 10.213.0.10\n",
		"    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        kubeconfig " + c.l.kubeconfig("coredns") + "\n",
		"    prometheus 10.213.0.10:9153\n",
		"    forward . /etc/resolv.conf {\n",
		"herd.internal.:53 {\n    bind 10.213.0.10\n    errors\n    forward . 10.213.1.1:5354\n    cache 5\n}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, got)
		}
	}
	for _, gone := range []string{"reload", "health", "ready"} {
		if strings.Contains(got, "    "+gone) {
			t.Errorf("Corefile has %s, which kube-combined's CoreDNS does not run:\n%s", gone, got)
		}
	}
	c.stubZones = nil
	if got := corefile(c); strings.Count(got, ":53 {") != 1 {
		t.Errorf("without stub zones, want one server block:\n%s", got)
	}
}

// With cluster DNS, kube-combined runs the coredns component after the API server is ready,
// with the Corefile, its kubeconfig and the node's address.
func TestProcessesWithClusterDNS(t *testing.T) {
	b := testBinaries()
	b.combined = "/b/kube-combined"
	c := dnsNode()
	first, rest := processes(b, c)
	if len(rest) != 0 || len(first) != 3 || first[2].Name != combinedName {
		t.Fatalf("first %v, rest %v: want containerd, etcd, kube-combined", names(first), names(rest))
	}
	args := first[2].Args
	i := slices.Index(args, dnsComponent)
	if i < 0 || args[i-1] != "--" {
		t.Fatalf("kube-combined's arguments lack a coredns group: %v", args)
	}
	want := []string{"--conf=" + c.l.config("Corefile"), "--kubeconfig=" + c.l.kubeconfig("coredns"), "--address=10.213.0.10"}
	if got := args[i+1 : i+1+len(want)]; !slices.Equal(got, want) {
		t.Errorf("coredns flags %v, want %v", got, want)
	}
	c.clusterDNS = netip.Addr{}
	first, _ = processes(b, c)
	if slices.Contains(first[2].Args, dnsComponent) {
		t.Errorf("without cluster DNS, kube-combined runs coredns: %v", first[2].Args)
	}
}

// The user the component reads the API as is the one the add-on's manifest grants.
func TestDNSUserIsTheAddonsUser(t *testing.T) {
	if dnsUser != addons.DNSUser {
		t.Errorf("credentials for %s, the add-on grants %s", dnsUser, addons.DNSUser)
	}
}
