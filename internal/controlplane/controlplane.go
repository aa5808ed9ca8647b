// Package controlplane assembles what `herd up` runs in one process: the store, the providers,
// the controller, the load balancer and the API server (which also serves /metrics). It owns their
// start order and their clean shutdown.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/imagepin"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/aws"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/store/etcd"
)

// Options configure a control plane.
type Options struct {
	// DataDir holds the store, the token and provider state. Created mode 0700.
	DataDir string
	// Listen is the API's address. Default: 127.0.0.1:7443. Port 0 picks a free port.
	Listen string
	// APISocket, when set, is a unix socket (made mode 0600) that serves the API too, with the
	// same token: the way in for herd processes in other network namespaces of this machine
	// (herd dns in a region's or the clients' network), which cannot reach the host's loopback.
	APISocket string
	// Provider is the default provider, used by regions that name none.
	Provider string
	// Store is where the control plane keeps its state: StoreBolt (default) or StoreEtcd.
	Store string
	// Etcd says which etcd to use when Store is StoreEtcd.
	Etcd etcd.Config
	// LeaderLeaseTTL is, on etcd, the lease of the replica that runs the controller, in seconds:
	// how long a replica that died keeps the leadership. Default: leader.DefaultTTL.
	LeaderLeaseTTL int
	// NewProvider, when set, builds the default provider instead of the one Provider names
	// (Provider must still be a known name): tests share one provider among replicas.
	NewProvider func(dataDir string, log *slog.Logger) (provider.Provider, error)
	// LBAddress is the host the load balancer's fleet listeners bind on. Default: 127.0.0.1.
	LBAddress string
	// ConfigPath is where the client config (server URL and token) is written.
	ConfigPath string
	Logger     *slog.Logger
	// Ready, if set, is called once the API serves, with its URL.
	Ready func(url string)
	// DNS runs herd's authoritative DNS server for a zone. Default: none.
	DNS DNSOptions
	// DiscoveryZone is the zone fleets are published in to each other's instances
	// (spec.discovery). Default: v1alpha1.DefaultDiscoveryZone.
	DiscoveryZone string
	// DiscoveryListen is the UDP and TCP address herd's DNS answers the discovery zone on, which
	// the instances' cluster DNS must reach. Default: none (not served).
	DiscoveryListen string
	// DiscoveryHTTPPort is the port the discovery names are called on alone
	// (http://NAME.<zone>/): every load balancer the names resolve to routes it by the Host
	// header to the fleet's spec.discovery.port listener (lbsync.Discovery). With
	// DiscoveryListen only. Default: 0, none (herd up's flag defaults to 80).
	DiscoveryHTTPPort int
	// Route53 keeps a Route 53 hosted zone in step with the routes. Default: none.
	Route53 Route53Options
	// OrphanGrace is how long an instance no fleet owns is left before the controller deletes it.
	// Default: controller.Options' (1m).
	OrphanGrace time.Duration
	// KeepOrphans makes the controller only report instances no fleet owns, never delete them.
	KeepOrphans bool
}

// DefaultDataDir is $XDG_DATA_HOME/herd, or ~/.local/share/herd.
func DefaultDataDir() string {
	dir := os.Getenv("XDG_DATA_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = "."
		}
		dir = filepath.Join(home, ".local", "share")
	}
	return filepath.Join(dir, "herd")
}

// providerFactories build the providers herd knows, by name.
var providerFactories = map[string]func(dataDir string, log *slog.Logger) (provider.Provider, error){
	fake.Name: func(dataDir string, log *slog.Logger) (provider.Provider, error) {
		log.Warn("the fake provider simulates instances in memory: nothing real runs; use --provider local for real one-node clusters")
		return fake.New(fake.Options{StateDir: filepath.Join(dataDir, "providers", fake.Name), BootDelay: 500 * time.Millisecond})
	},
	aws.Name: newAWSProvider,
	local.Name: func(dataDir string, log *slog.Logger) (provider.Provider, error) {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find the herd binary that runs each instance's agent: %w", err)
		}
		p, err := local.New(local.Options{DataDir: dataDir, Logger: log, HerdBinary: exe})
		if err == nil {
			p.AnnounceHostChanges()
		}
		return p, err
	},
}

// ProviderNames lists the providers this build knows.
func ProviderNames() []string {
	names := make([]string, 0, len(providerFactories))
	for n := range providerFactories {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Run starts the control plane and blocks until ctx ends, then stops every part in order.
func Run(ctx context.Context, opts Options) error {
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:7443"
	}
	if opts.LBAddress == "" {
		opts.LBAddress = "127.0.0.1"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	newProvider, ok := providerFactories[opts.Provider]
	if !ok {
		return fmt.Errorf("--provider %q: this build knows %s", opts.Provider, strings.Join(ProviderNames(), ", "))
	}
	if opts.NewProvider != nil {
		newProvider = opts.NewProvider
	}
	if err := checkStoreName(opts.Store); err != nil {
		return err
	}
	if err := os.MkdirAll(opts.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	st, err := openStore(ctx, opts, log)
	if err != nil {
		return err
	}
	defer st.Close()
	p := &parts{opts: opts, log: log, st: st}
	defer p.close()
	if err := p.build(ctx, newProvider); err != nil {
		return err
	}
	if err := client.AddServer(opts.ConfigPath, p.api.url, p.token); err != nil {
		return err
	}

	// The parts run in stages, stopped in reverse. The load balancer keeps serving its last
	// configuration whatever the controller does, and the event writer stores the events of the
	// last reconciles: both stop last, after the API has let requests in flight finish.
	var m manager
	m.stage(runnable{"load balancer", p.balancer.Start}, runnable{"events", p.recorder.Start})
	m.stage(p.running()...)
	m.stage(runnable{"api server", p.api.Start})
	m.started = func() {
		log.Info("control plane up", "api", p.api.url, "dashboard", p.api.url+"/ui/", "kube_proxy", p.api.kubeProxy.URL,
			"data_dir", opts.DataDir, "client_config", opts.ConfigPath, "provider", p.prov.Name())
		if opts.Ready != nil {
			opts.Ready(p.api.url)
		}
	}
	m.stopping = func() { log.Info("shutting down") }
	err = m.run(ctx)
	log.Info("stopped")
	return err
}

// providersAs returns the providers that implement T (an optional provider interface), by name.
func providersAs[T any](providers map[string]provider.Provider) map[string]T {
	out := map[string]T{}
	for name, p := range providers {
		if v, ok := p.(T); ok {
			out[name] = v
		}
	}
	return out
}

// pinImages is herd's image store as the API pins fleets' images from it, lists and prunes it.
type pinImages struct{ *image.Store }

func (p pinImages) Resolve(ref string) (string, error) {
	digest, err := p.Store.Resolve(ref)
	if errors.Is(err, image.ErrNotFound) {
		return "", imagepin.NotFound(err)
	}
	return digest, err
}

// imageless names the providers whose instances boot no node image.
func imageless(providers map[string]provider.Provider) map[string]bool {
	out := map[string]bool{}
	for name, p := range providers {
		if p.Capabilities().Imageless {
			out[name] = true
		}
	}
	return out
}
