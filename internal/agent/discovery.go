// Discovery: the cluster DNS of an instance forwards herd's discovery zone (spec.discovery,
// NAME.herd.internal) to herd's discovery DNS. The zone and the server are herd up's, known only
// when the instance is created, not when its image is built, so the CoreDNS add-on imports its
// extra server blocks from a ConfigMap that may be missing (DiscoveryConfigMap, mounted at
// /etc/coredns-discovery), and the agent applies that ConfigMap before the add-on's Deployment.

package agent

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
)

// DiscoveryConfigMap is the ConfigMap of kube-system whose DiscoveryKey the CoreDNS add-on
// imports as server blocks of its Corefile (internal/addons/coredns/coredns.yaml names it too).
const (
	DiscoveryConfigMap = "herd-discovery"
	DiscoveryKey       = "discovery.server"
)

// Discovery is where the instance's cluster DNS sends the discovery zone.
type Discovery struct {
	// Zone is the zone, e.g. "herd.internal." (a trailing dot or none).
	Zone string
	// Server is herd's discovery DNS as the instance reaches it: its queries must leave from the
	// instance's address, which tells herd the calling fleet.
	Server netip.AddrPort
}

// check says what is wrong with d, naming the flag.
func (d Discovery) check() error {
	zone := strings.TrimSuffix(d.Zone, ".")
	if msgs := validation.IsDNS1123Subdomain(zone); len(msgs) > 0 {
		return fmt.Errorf("--discovery-zone %q: want a domain name such as herd.internal.: %s", d.Zone, strings.Join(msgs, "; "))
	}
	if !d.Server.IsValid() || d.Server.Port() == 0 || d.Server.Addr().IsUnspecified() {
		return fmt.Errorf("--discovery-dns %q: want the IP:port herd's discovery DNS answers the instances on", d.Server)
	}
	return nil
}

// corefile is the server block the CoreDNS add-on imports: the zone forwarded to herd, its
// answers (and NXDOMAINs) cached no longer than their 5 s TTL, so that a region that loses its
// last Ready instance is left as soon as herd says so.
func (d Discovery) corefile() string {
	return fmt.Sprintf("%s:53 {\n    errors\n    forward . %s\n    cache 5\n}\n", strings.TrimSuffix(d.Zone, ".")+".", d.Server)
}

// object is the ConfigMap that carries the server block.
func (d Discovery) object() object {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata":   map[string]any{"name": DiscoveryConfigMap, "namespace": "kube-system"},
		"data":       map[string]any{DiscoveryKey: d.corefile()},
	}}
	return object{obj: u, file: "(herd-agent --discovery-zone)", doc: 1}
}

// withDiscovery puts the discovery ConfigMap before the bundle's objects when the image runs
// cluster DNS, so that CoreDNS finds it when it starts.
func withDiscovery(objs []object, d *Discovery, clusterDNS bool) []object {
	if d == nil || !clusterDNS {
		return objs
	}
	return append([]object{d.object()}, objs...)
}
