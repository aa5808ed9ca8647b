package provider

import (
	"context"

	"herd.dev/herd/internal/regionnet"
)

// RegionNetworks MAY be implemented by a provider whose regions are networks of their own (the
// local provider's network lab; a cloud provider's VPCs): it returns them. The control plane asks
// for them once, when it starts, and reaches every region's network through them: see package
// regionnet for what a provider implements.
type RegionNetworks interface {
	RegionNetworks() regionnet.Networks
}

// RegionKeeper MAY be implemented by a provider whose regions hold resources of their own beside
// their instances (the local provider's region networks), made with a region's first instance.
// The controller says which regions its fleets name; the provider keeps those while they have no
// instance, so that a fleet scaled to zero and back finds its region as it was, and removes the
// others once they have none. It is the provider's, not the networks', since only the provider
// knows when a region's last instance is gone, and the leader fences it as it fences Delete.
type RegionKeeper interface {
	// KeepRegions replaces the regions kept with regions, and removes at once what the regions
	// no longer kept and without instances hold.
	KeepRegions(ctx context.Context, regions []string) error
}

// InstanceKiller MAY be implemented by a provider that can kill an instance the way a crash
// does, for chaos experiments.
type InstanceKiller interface {
	// KillInstance sends SIGKILL to every process of the instance and returns once none is
	// left. It leaves the instance's record and resources for Delete: the instance is dead, as
	// after a crash, and the provider reports it Failed.
	KillInstance(ctx context.Context, name string) error
}
