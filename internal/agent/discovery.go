// Discovery: the cluster DNS of an instance forwards herd's discovery zone (spec.discovery,
// NAME.herd.internal) to herd's discovery DNS. The zone and the server are herd up's, known only
// when the instance is created, not when its image is built, so the agent gives the zone to the
// distribution, which writes the cluster DNS's configuration when the node starts.

package agent

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"herd.dev/herd/internal/agent/distro"
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

// discoveryCache bounds how long the cluster DNS keeps the zone's answers (and NXDOMAINs): their
// 5 s TTL, so that a region that loses its last Ready instance is left as soon as herd says so.
const discoveryCache = 5 * time.Second

// stubZones are the zones the cluster DNS forwards elsewhere: the discovery zone, to herd, when
// the agent has discovery and the image runs cluster DNS.
func stubZones(d *Discovery, clusterDNS bool) []distro.StubZone {
	if d == nil || !clusterDNS {
		return nil
	}
	return []distro.StubZone{{Zone: d.Zone, Server: d.Server, Cache: discoveryCache}}
}
