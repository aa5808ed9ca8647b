// Package regionnet defines what herd's control plane needs of the networks its regions run in,
// whoever makes them: each region is a network of its own with a load balancer inside it that
// serves the region's clients, and one front door stands where every region's clients are. The
// local provider's network lab makes them on this machine, of network namespaces and shaped
// links; a cloud provider makes them of VPCs in real regions (on AWS: a VPC per region, its load
// balancer on an instance or NLB inside it, the front door where the clients are, chaos by network
// ACLs).
//
// A provider whose regions are networks returns its Networks (provider.RegionNetworks); the
// control plane asks for it once, in one place, and hands it to what uses it: the regional load
// balancers' configurer (EnsureRegion, then the load balancer's admin API with the region's
// targets), the front door's (EnsureFrontDoor), the global routes (Region: where clients reach a
// region), the regions' probes (DialFromClients) and the chaos engine (Chaos).
//
// # Contract
//
// A Networks MUST:
//   - make EnsureRegion and EnsureFrontDoor idempotent, and adopt what an earlier control plane
//     made: a load balancer or front door that runs keeps running with its configuration;
//   - keep every region's load balancer and the front door serving while the control plane is
//     down or cut off from them (they outlive it, and need nothing of it to serve);
//   - give an admin URL that the control plane reaches over a path that no Partition cuts;
//   - make Partition and Degrade act on the region's clients only: what runs in the region keeps
//     running, and the control plane still reaches it;
//   - undo every chaos action on Restore, and at the latest when the provider starts again, so
//     that no experiment outlives the control plane that ran it;
//   - make RemoveFrontDoor idempotent (nothing to remove is no error);
//   - be safe for concurrent use.
//
// A Networks SHOULD dial in DialFromClients from where the regions' clients are, so that what it
// reaches is what a client reaches (a partition cuts its connections too), and return errors
// that name what failed and what to fix.
package regionnet

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sort"
	"time"
)

// Region tells how to reach the load balancer of a region's network.
type Region struct {
	Region string
	// DataAddress is where the region's clients reach the load balancer's listeners.
	DataAddress netip.Addr
	// AdminURL is its admin API (lb.NewAdminHandler), reachable from the control plane.
	AdminURL string
	// TokenFile holds the admin API's bearer token. A secret: never log its content.
	TokenFile string
}

// FrontDoor tells how to reach the global front door (`herd front`).
type FrontDoor struct {
	// DataAddress is where clients reach the front door's listeners (bound on ":<port>").
	DataAddress netip.Addr
	// AdminURL is its admin API (lb.NewAdminHandler), reached with HTTP.
	AdminURL string
	// HTTP is the client that reaches the admin API (the network lab's is on a Unix socket).
	// Default: http.DefaultClient.
	HTTP *http.Client
	// TokenFile holds the admin API's bearer token. A secret: never log its content.
	TokenFile string
}

// Networks makes and runs the networks of a provider's regions. See the package documentation
// for the contract.
type Networks interface {
	// EnsureRegion makes the region's network as options say (the region's provider options,
	// e.g. the network lab's latency, jitter and loss), starts its load balancer or adopts the one
	// that runs, and says how to reach it. A new load balancer serves no listener until it is
	// configured over its admin API.
	EnsureRegion(ctx context.Context, region string, options map[string]string) (Region, error)
	// DataAddress says where the region's clients reach its load balancer, without making
	// anything; ok is false while the region has no network.
	DataAddress(ctx context.Context, region string) (addr netip.Addr, ok bool)
	// EnsureFrontDoor starts the front door where the regions' clients are, or adopts the one
	// that runs, and says how to reach it. A new one serves no listener until it is configured.
	EnsureFrontDoor(ctx context.Context) (FrontDoor, error)
	// RemoveFrontDoor stops the front door and gives back what it held (its address, and the
	// network it lives in once nothing else does).
	RemoveFrontDoor(ctx context.Context) error
	// DialFromClients dials from where the regions' clients are. The control plane's own path to
	// a region may be another one, that no partition cuts.
	DialFromClients(ctx context.Context, network, address string) (net.Conn, error)
	Chaos
}

// InstanceSide is a Networks whose instances reach their region's load balancer on another
// address than the region's clients do (the network lab's router has a leg on the instances'
// bridge): the address herd's DNS answers discovery names with (spec.discovery).
type InstanceSide interface {
	// InstanceAddress is where the region's instances reach its load balancer; ok is false while
	// the region has no network.
	InstanceAddress(ctx context.Context, region string) (addr netip.Addr, ok bool)
}

// Chaos cuts or degrades a region's link to its clients. Each action lasts until Restore, or
// until the provider starts again, which undoes it.
type Chaos interface {
	// Partition cuts the region off its clients: no packet crosses its link either way. What
	// runs in the region (its load balancer, its instances) keeps running, and the control
	// plane still reaches it.
	Partition(ctx context.Context, region string) error
	// Degrade replaces the link's shape: latency is the round trip added, loss the share of
	// packets dropped in each direction (0 to 1).
	Degrade(ctx context.Context, region string, latency time.Duration, loss float64) error
	// Restore gives the link back the shape of the region's options.
	Restore(ctx context.Context, region string) error
}

// First returns the Networks of the first provider by name, or nil when there is none: the one
// that runs the front door and dials from the clients' side.
func First(networks map[string]Networks) Networks {
	names := make([]string, 0, len(networks))
	for n := range networks {
		names = append(names, n)
	}
	if len(names) == 0 {
		return nil
	}
	sort.Strings(names)
	return networks[names[0]]
}
