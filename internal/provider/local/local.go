// Package local is herd's provider of real instances on this machine: each instance is a whole
// one-node Kubernetes cluster (etcd, kube-apiserver, scheduler, controller-manager, kubelet,
// kube-proxy, containerd and runc), booted by herd-agent from a node image bundle, in a network
// namespace of its own with its own IP address on a host bridge.
//
// # Layout
//
// Everything the provider keeps is under <data dir>/providers/local/ (mode 0700):
//
//	lock                     flock taken to allocate subnets and addresses and to add or remove bridges
//	host-settings.json       the host's kernel settings from before the first instance (hostsettings.go)
//	regions/<region>.json    the region's /24 subnet (from 10.213.0.0/16), bridge and last address given
//	net/                     the network lab's state (internal/netlab, docs/regions.md): the regions'
//	                         networks, the internet namespace, client networks, the front door
//	instances/<name>/        one instance (mode 0700):
//	  lock                   flock held by Create and Delete of this instance
//	  instance.json          the provider's record (spec, bundle, address, netns, veth, cgroup root,
//	                         agent pid and start time), written atomically, mode 0600
//	  agent.log              the agent's own stdout and stderr
//	  credential             the instance's credential, which the agent's port requires (mode 0600;
//	                         with Options.EC2MetadataPort the user data holds it instead)
//	  agent/                 the agent's state directory (status.json, kubeconfig, logs/, the cluster's data)
//
// On the host, an instance named N has the network namespace herd-N (eth0 with its address, a
// default route through the bridge), the host veth hv<hash of N> enslaved to its region's bridge
// herdbr-<hash of data dir and region> (whose address is the subnet's .1), and the cgroup /herd-N
// in every hierarchy, under which the agent puts every process of the instance. Instance
// addresses are .10 to .254 of the region's subnet. The host gets no iptables rule: the host
// reaches instances on the directly attached bridge, and every rule of the cluster lives in the
// instance's namespace.
//
// Addresses are allocated under the provider lock from the records on disk, and the record that
// holds an address is written before anything uses it, so that no crash can hand an address out
// twice. The provider and the agent follow the contract written in docs/local-instance.md: the
// provider starts the agent in the network namespace and in a mount namespace of its own, reads
// its state from agent/status.json and tells a dead agent by its pid and start time.
//
// Instances outlive the process that created them (Capabilities.Persistent): the next herd up
// lists them from the instance directories and adopts them by their labels.
//
// # Files
//
// local.go holds New and the Provider; create.go, instances.go (Get, List and the state they
// report) and delete.go its operations. alloc.go allocates subnets and addresses, record.go keeps
// instance records and locks, network.go sets up namespaces, bridges and veths, teardown.go
// removes what an instance left on the host, hostsettings.go records and restores the kernel
// settings the kubelet changes, and deps.go checks the host.
//
// Each region is also a network of its own (docs/regions.md), which the network lab
// (internal/netlab) makes behind the region's bridge: lab.go gives the lab the bridges and the
// provider lock (netlab.Instances) and the control plane the lab (RegionNetworks), and keep.go
// keeps regions without instances.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/netlab"
	"herd.dev/herd/internal/provider"
)

// Name is the provider name regions use.
const Name = "local"

// DefaultRegion is the region of instances whose spec names none.
const DefaultRegion = "local"

// DefaultSubnetPool is where regions' subnets come from.
var DefaultSubnetPool = netip.MustParsePrefix("10.213.0.0/16")

var (
	_ provider.Provider         = (*Provider)(nil)
	_ provider.OptionsValidator = (*Provider)(nil)
)

// Options configure a local provider.
type Options struct {
	// DataDir is herd's data directory: instances are kept under <DataDir>/providers/local and
	// node image bundles are read from image.StoreDir(DataDir). Required.
	DataDir string
	// HerdBinary is the herd executable the provider runs its helpers with (`herd lb`, `herd
	// link-relay`); each instance's agent is the herd-agent beside it (AgentBinary).
	// Default: this process's executable (os.Executable).
	HerdBinary string
	// Logger receives the provider's logs, with component=provider-local. Default: discard.
	Logger *slog.Logger
	// SubnetPool is the IPv4 range regions' /24 subnets are taken from. Default: 10.213.0.0/16.
	SubnetPool netip.Prefix
	// InternetPool is the IPv4 range the /24 of the internet namespace (where regions' routers
	// and clients' networks meet) is taken from. Default: 10.216.0.0/16.
	InternetPool netip.Prefix
	// StopTimeout bounds how long Delete lets the agent stop the workload and the cluster after
	// SIGTERM before it kills every process of the instance. Default: 20s.
	StopTimeout time.Duration
	// Credentials give each instance's agent its credential (internal/agentauth), which herd up's
	// requests to the agent carry. Default: the keyring of DataDir, the one herd up opens.
	Credentials *agentauth.Keyring
	// SysctlRoot is where the host kernel settings instances change are recorded from and
	// restored to (see KubeletHostSettings). Default: /proc/sys; tests give a directory of their own.
	SysctlRoot string
	// ImagesDir is the node image store instances boot their bundles from.
	// Default: image.StoreDir(DataDir), the one herd image build writes.
	ImagesDir string
	// EC2MetadataPort, when set, starts each instance's agent as on EC2 (herd-agent --ec2): it
	// reads its name, address and credential and its bundle's digest from an instance metadata
	// service (IMDSv2) and its user data, which listens on this port of the host and which the
	// instance reaches at its region's gateway, as an EC2 instance reaches its own at
	// 169.254.169.254. internal/provider/aws/twinlocal runs the EC2 twin's instances so. Default:
	// 0, the provider tells the agent by flags.
	EC2MetadataPort int
}

// Provider runs instances as one-node Kubernetes clusters in network namespaces of this machine.
// It is safe for concurrent use, also by several processes sharing a data directory.
type Provider struct {
	opts   Options
	log    *slog.Logger
	dir    string // <DataDir>/providers/local
	images *image.Store

	// deps checks the host; tests replace it.
	deps func() error

	// lab makes the regions' networks.
	lab *netlab.Lab

	keptMu sync.Mutex
	kept   map[string]bool // the regions KeepRegions keeps without instances

	// discovery is herd's discovery DNS, which new instances' cluster DNS forwards its zone to;
	// nil while none is served (discovery.go).
	discovery atomic.Pointer[DiscoveryDNS]
}

// New returns a local provider for the data directory in opts. It creates the provider's
// directory but checks the host only when an instance is created, so that a control plane without
// the dependencies still starts and lists what exists.
func New(opts Options) (*Provider, error) {
	if opts.DataDir == "" {
		return nil, errors.New("local provider: a data directory is required")
	}
	if opts.HerdBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local provider: find the herd binary: %w", err)
		}
		opts.HerdBinary = exe
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if !opts.SubnetPool.IsValid() {
		opts.SubnetPool = DefaultSubnetPool
	}
	if !opts.InternetPool.IsValid() {
		opts.InternetPool = netlab.DefaultInternetPool
	}
	if opts.StopTimeout <= 0 {
		opts.StopTimeout = 20 * time.Second
	}
	if opts.SysctlRoot == "" {
		opts.SysctlRoot = DefaultSysctlRoot
	}
	if opts.EC2MetadataPort < 0 || opts.EC2MetadataPort > 65535 {
		return nil, fmt.Errorf("local provider: EC2 metadata port %d is not a TCP port", opts.EC2MetadataPort)
	}
	for _, pool := range []netip.Prefix{opts.SubnetPool, opts.InternetPool} {
		if !pool.Addr().Is4() || pool.Bits() > hostnet.SubnetBits {
			return nil, fmt.Errorf("local provider: subnet pool %s must be an IPv4 prefix of /%d or shorter", pool, hostnet.SubnetBits)
		}
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("local provider: data dir: %w", err)
	}
	if opts.Credentials == nil {
		k, err := agentauth.Open(opts.DataDir)
		if err != nil {
			return nil, fmt.Errorf("local provider: %w", err)
		}
		opts.Credentials = k
	}
	// Absolute and without symlinks: the paths given to the agent are compared with the mount
	// table and with the kubelet's log symlinks, which hold resolved paths.
	dataDir, err := filepath.Abs(opts.DataDir)
	if err == nil {
		dataDir, err = filepath.EvalSymlinks(dataDir)
	}
	if err != nil {
		return nil, fmt.Errorf("local provider: data dir: %w", err)
	}
	opts.DataDir = dataDir
	if abs, err := filepath.Abs(opts.HerdBinary); err == nil {
		opts.HerdBinary = abs
	}
	if opts.ImagesDir == "" {
		opts.ImagesDir = image.StoreDir(dataDir)
	}
	if opts.ImagesDir, err = filepath.Abs(opts.ImagesDir); err != nil {
		return nil, fmt.Errorf("local provider: images dir: %w", err)
	}
	p := &Provider{
		opts:   opts,
		log:    opts.Logger.With("component", "provider-local"),
		dir:    filepath.Join(dataDir, "providers", Name),
		images: image.NewStore(opts.ImagesDir),
	}
	p.deps = func() error { return CheckHost(p.opts.HerdBinary) }
	p.lab, err = netlab.New(netlab.Options{
		Dir: filepath.Join(p.dir, netSubdir), DataDir: dataDir, HerdBinary: opts.HerdBinary,
		Logger: opts.Logger, InternetPool: opts.InternetPool, SubnetPool: opts.SubnetPool, DefaultRegion: DefaultRegion,
		Instances: labInstances{p},
	})
	if err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	if err := os.MkdirAll(p.instancesDir(), 0o700); err != nil {
		return nil, fmt.Errorf("local provider: %w", err)
	}
	// A crash between the last instance's deletion and the restore left the record behind.
	if err := p.withProviderLock(p.restoreHostSettings); err != nil {
		p.log.Warn("the host's kernel settings from before herd's instances could not be restored", "err", err)
	}
	// Chaos actions never outlive the herd up that made them, and a crash may have left a
	// region's network half made or half removed.
	if err := p.lab.Reconcile(context.Background()); err != nil {
		p.log.Warn("the regions' networks could not be put in order", "err", err)
	}
	return p, nil
}

// Name implements provider.Provider.
func (p *Provider) Name() string { return Name }

// Capabilities implements provider.Provider: instances outlive herd up.
func (p *Provider) Capabilities() provider.Capabilities {
	return provider.Capabilities{Persistent: true}
}

// InstanceDir returns the directory of the instance name (whether or not it exists). The agent's
// state directory, with the admin kubeconfig, is its "agent" subdirectory.
func (p *Provider) InstanceDir(name string) string { return filepath.Join(p.instancesDir(), name) }

// HostNames returns the host-wide names an instance called name gets: its network namespace
// (/run/netns/<netns>), the host end of its veth pair, and the cgroup (in every hierarchy) every
// process of the instance runs under.
func HostNames(name string) (netns, hostVeth, cgroupRoot string) {
	return netnsName(name), vethName(name), cgroupRootOf(name)
}

// BridgeName returns the host bridge of a region of this provider's data directory.
func (p *Provider) BridgeName(region string) string { return bridgeName(p.opts.DataDir, region) }

func (p *Provider) instancesDir() string { return filepath.Join(p.dir, "instances") }

func (p *Provider) regionsDir() string { return filepath.Join(p.dir, regionsSubdir) }
