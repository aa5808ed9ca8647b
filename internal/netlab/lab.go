package netlab

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Options configure a Lab.
type Options struct {
	// Dir is where the lab keeps its state (docs/regions.md: the regions' networks, the internet,
	// the client networks, the front door). Required.
	Dir string
	// DataDir is herd's data directory: the lab's host-wide names (namespaces, devices) are hashed
	// from it, so that two data directories never share one. Required.
	DataDir string
	// HerdBinary is the herd executable the lab runs its helpers with (`herd link-relay`, `herd
	// lb`, `herd front`). Required.
	HerdBinary string
	// Logger receives the lab's logs, with component=netlab. Default: discard.
	Logger *slog.Logger
	// InternetPool is the IPv4 range the /24s of the internet namespace and of the client
	// networks are taken from. Default: DefaultInternetPool.
	InternetPool netip.Prefix
	// DefaultRegion is the region an empty region name means.
	DefaultRegion string
	// SubnetPool is the range the regions' subnets are in: every router routes it back through
	// the host, so that the instances of the other regions reach its load balancer.
	// Default: 10.213.0.0/16.
	SubnetPool netip.Prefix
	// Instances is the provider whose instances live in the lab's regions. Required.
	Instances Instances
}

// Instances is what the lab needs of the instance provider whose regions it makes networks of:
// the provider owns each region's bridge and subnet, which its instances and the region's router
// share, and the lock under which both change what they share. Every method but Lock is called
// with the lock held.
type Instances interface {
	// Lock runs f holding the provider's lock.
	Lock(f func() error) error
	// EnsureBridge gives the region its subnet and its bridge, as the region's first instance
	// does, and returns them.
	EnsureBridge(ctx context.Context, region string) (Bridge, error)
	// Bridges returns every region the provider has a bridge, a subnet or an instance in.
	Bridges() ([]Bridge, error)
	// RemoveBridge removes the bridge of a region that has no instance.
	RemoveBridge(ctx context.Context, region string) error
}

// Bridge is a region's bridge as the instance provider keeps it.
type Bridge struct {
	Region string
	// Name is the bridge's interface name, "" while the region has none.
	Name string
	// Subnet is the region's /24, invalid while the region has none.
	Subnet netip.Prefix
	// Instances is how many instances the region has.
	Instances int
}

// Lab makes and runs the regions' networks, the internet namespace they meet in, client
// networks and the front door, on this host. It is safe for concurrent use, also by several
// processes sharing a data directory (under the Instances' lock).
type Lab struct {
	opts Options
	log  *slog.Logger
}

// New returns a lab as opts say. It makes nothing: Reconcile puts in order what an earlier
// process left.
func New(opts Options) (*Lab, error) {
	if opts.Dir == "" || opts.DataDir == "" || opts.HerdBinary == "" || opts.Instances == nil {
		return nil, errors.New("network lab: Dir, DataDir, HerdBinary and Instances are required")
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if !opts.InternetPool.IsValid() {
		opts.InternetPool = DefaultInternetPool
	}
	if !opts.SubnetPool.IsValid() {
		opts.SubnetPool = netip.MustParsePrefix("10.213.0.0/16")
	}
	return &Lab{opts: opts, log: opts.Logger.With("component", "netlab")}, nil
}

// isLabel reports whether s is a DNS label, as region and client network names must be.
func isLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }

// bridges returns the instance provider's regions by name. The caller holds the lock.
func (l *Lab) bridges() (map[string]Bridge, error) {
	list, err := l.opts.Instances.Bridges()
	if err != nil {
		return nil, fmt.Errorf("the regions' bridges: %w", err)
	}
	out := make(map[string]Bridge, len(list))
	for _, b := range list {
		out[b.Region] = b
	}
	return out, nil
}
