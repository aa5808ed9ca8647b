// Cluster DNS: CoreDNS's server and plugins run in kube-combined (its coredns component), not
// in a pod, when the image has the DNS add-on. The process already carries the client libraries
// CoreDNS is made of, so DNS costs the node its caches only, where a pod cost a process (about
// 40 MB), a pause and a share of a containerd shim. It serves on the node's address; the kube-dns
// Service, which has no selector, gets that address as its endpoint from the component, ready
// while it answers (hack/kubernetes/combined/dnsendpoint.go).

package upstream

import (
	"errors"
	"fmt"
	"strings"

	"herd.dev/herd/internal/agent/pki"
)

// dnsComponent is the coredns component's name in kube-combined, and the name of its kubeconfig.
const dnsComponent = "coredns"

// dnsUser is the user the component reads the API as; the DNS add-on's manifest grants it what
// CoreDNS reads and the kube-dns EndpointSlice it writes (addons.DNSUser, the same).
const dnsUser = "system:coredns"

// errDNSNeedsCombined says that cluster DNS has no process to run in.
var errDNSNeedsCombined = errors.New("the image has cluster DNS, which runs in kube-combined, and kube-combined is not built: run make kubernetes")

// corefileTemplate is the Corefile of a one-node cluster, as kubeadm writes it less what serves a
// pod (health and ready, asked by the pod's probes: the component's own probe asks a name
// instead) and reload (the file is written once). Its arguments: the node's address (twice, the
// DNS server's and the metrics'), the component's kubeconfig. Every name that is not
// cluster.local's goes to the resolvers of the node's /etc/resolv.conf, the kubelet's resolvConf,
// as a pod of dnsPolicy Default did.
const corefileTemplate = `.:53 {
    bind %[1]s
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig %[2]s
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    prometheus %[1]s:9153
    forward . /etc/resolv.conf {
        max_concurrent 1000
    }
    cache 30
    loop
    loadbalance
}
`

// stubTemplate is the server block of a zone forwarded to a server of its own (a
// distro.StubZone), bound to the node's address as the main block is (one port, one address).
// Its arguments: the zone, the node's address, the server, the seconds answers are cached.
const stubTemplate = `%[1]s:53 {
    bind %[2]s
    errors
    forward . %[3]s
    cache %[4]d
}
`

// corefile is the node's Corefile: corefileTemplate's server block, then one per stub zone.
func corefile(c nodeConfig) string {
	s := fmt.Sprintf(corefileTemplate, c.address, c.l.kubeconfig(dnsComponent))
	for _, z := range c.stubZones {
		s += fmt.Sprintf(stubTemplate, strings.TrimSuffix(z.Zone, ".")+".", c.address, z.Server, int(z.Cache.Seconds()))
	}
	return s
}

// writeCorefile writes the Corefile when the node has cluster DNS.
func writeCorefile(c nodeConfig) error {
	if !c.clusterDNS.IsValid() {
		return nil
	}
	if err := pki.WriteFile(c.l.config("Corefile"), []byte(corefile(c)), 0o644); err != nil {
		return fmt.Errorf("upstream: Corefile: %w", err)
	}
	return nil
}

// dnsArgs are the coredns component's flags.
func dnsArgs(c nodeConfig) []string {
	return []string{
		"--conf=" + c.l.config("Corefile"),
		"--kubeconfig=" + c.l.kubeconfig(dnsComponent),
		"--address=" + c.address.String(),
	}
}
