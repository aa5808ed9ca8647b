package provider

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"time"
)

// RegionBalancer tells how to reach the load balancer a provider runs in a region.
type RegionBalancer struct {
	Region string
	// DataAddress is where the region's clients reach the load balancer's listeners.
	DataAddress netip.Addr
	// AdminURL is its admin API (lb.NewAdminHandler), reachable from the control plane.
	AdminURL string
	// TokenFile holds the admin API's bearer token. A secret: never log its content.
	TokenFile string
}

// RegionalBalancers MAY be implemented by a provider that runs a load balancer in each region,
// inside the region's network (the local provider's regional `herd lb`). The control plane then
// configures each one over its admin API with that region's targets only, so that a region keeps
// serving its clients while the control plane is down or cut off from it.
type RegionalBalancers interface {
	// EnsureRegionBalancer makes the region's network as options say (the region's provider
	// options), starts its load balancer or adopts the one that runs, and says how to reach it.
	// A load balancer that runs keeps its configuration. It is idempotent.
	EnsureRegionBalancer(ctx context.Context, region string, options map[string]string) (RegionBalancer, error)
}

// RegionKeeper MAY be implemented by a provider whose regions hold resources of their own beside
// their instances (the local provider's region networks), made with a region's first instance.
// The controller says which regions its fleets name; the provider keeps those while they have no
// instance, so that a fleet scaled to zero and back finds its region as it was, and removes the
// others once they have none.
type RegionKeeper interface {
	// KeepRegions replaces the regions kept with regions, and removes at once what the regions
	// no longer kept and without instances hold.
	KeepRegions(ctx context.Context, regions []string) error
}

// FrontDoor tells how to reach the global front door a provider runs (`herd front`).
type FrontDoor struct {
	// DataAddress is where clients reach the front door's listeners (bound on ":<port>").
	DataAddress netip.Addr
	// AdminURL is its admin API (lb.NewAdminHandler), reached with HTTP.
	AdminURL string
	// HTTP is the client that reaches the admin API (the local provider's is on a Unix socket).
	// Default: http.DefaultClient.
	HTTP *http.Client
	// TokenFile holds the admin API's bearer token. A secret: never log its content.
	TokenFile string
}

// FrontDoors MAY be implemented by a provider that runs a global front door where the regions'
// clients are (the local provider's, in its internet namespace). The control plane then gives
// it, over its admin API, one listener per listener of every fleet its regions' own load
// balancers serve, with those load balancers as the regions.
type FrontDoors interface {
	// EnsureFrontDoor starts the front door or adopts the one that runs, and says how to reach
	// it. A front door that runs keeps its configuration. It is idempotent.
	EnsureFrontDoor(ctx context.Context) (FrontDoor, error)
	// RemoveFrontDoor stops the front door and gives back what it held (its address, and the
	// network it lives in once nothing else does). It is idempotent: nothing to remove is no error.
	RemoveFrontDoor(ctx context.Context) error
}

// ClientDialer MAY be implemented by a provider whose regions are networks apart from the
// control plane's host: it dials from where the regions' clients are (for the local provider,
// its internet namespace), so that what it reaches is what a client reaches. The control plane's
// own path to a region may be another one that no partition cuts.
type ClientDialer interface {
	DialFromClients(ctx context.Context, network, address string) (net.Conn, error)
}

// RegionChaos MAY be implemented by a provider whose regions are networks: a chaos engine cuts
// or degrades a region's link. Each action lasts until Restore or until the provider starts
// again, which undoes it.
type RegionChaos interface {
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

// InstanceKiller MAY be implemented by a provider that can kill an instance the way a crash
// does, for chaos experiments.
type InstanceKiller interface {
	// KillInstance sends SIGKILL to every process of the instance and returns once none is
	// left. It leaves the instance's record and resources for Delete: the instance is dead, as
	// after a crash, and the provider reports it Failed.
	KillInstance(ctx context.Context, name string) error
}
