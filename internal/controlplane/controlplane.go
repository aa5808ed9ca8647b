// Package controlplane assembles what `herd up` runs in one process: the store, the providers,
// the controller, the load balancer and the API server (which also serves /metrics). It owns their
// start order and their clean shutdown.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agentmetrics"
	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/chaos"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/cpmetrics"
	"herd.dev/herd/internal/events"
	"herd.dev/herd/internal/global/front"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/global/rtt"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/imagepin"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbmonitor"
	"herd.dev/herd/internal/lbsync"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/provider/fake"
	"herd.dev/herd/internal/provider/local"
	"herd.dev/herd/internal/regionlb"
	"herd.dev/herd/internal/store/etcd"
	"herd.dev/herd/internal/usage"
	"herd.dev/herd/internal/web"
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
	factory, ok := providerFactories[opts.Provider]
	if !ok {
		return fmt.Errorf("--provider %q: this build knows %s", opts.Provider, strings.Join(ProviderNames(), ", "))
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
	token, err := apiToken(ctx, st, filepath.Join(opts.DataDir, "token"))
	if err != nil {
		return err
	}
	if opts.NewProvider != nil {
		factory = opts.NewProvider
	}
	prov, err := factory(opts.DataDir, log)
	if err != nil {
		return fmt.Errorf("provider %s: %w", opts.Provider, err)
	}
	providers := map[string]provider.Provider{prov.Name(): prov}
	images := image.NewStore(image.StoreDir(opts.DataDir))
	resolve := func(ref string) (string, error) {
		digest, err := images.Resolve(ref)
		if errors.Is(err, image.ErrNotFound) {
			return ref, nil // the provider reports a missing image on create, with the fix
		}
		return digest, err
	}
	// The one cache of fleets and instances that the controller and the routes follow.
	cache := informer.New(informer.Options{Store: st, Logger: log})
	balancer := lb.New(lb.Options{Logger: log})
	targets := lbsync.New(balancer, opts.LBAddress, log)
	// The monitor gives the controller the load balancer's view: health and error rates for
	// self-healing, load for autoscaling.
	monitor := lbmonitor.New(balancer, lbmonitor.Options{RegionOf: targets.RegionOf})
	decisions := cpmetrics.NewDecisions()
	recorder := events.New(events.Options{Store: st, Logger: log, Recorded: decisions.Event})
	queueMetrics := cpmetrics.NewQueueMetrics()
	// The controller and the autoscaler run in terms (leading.go): for as long as herd up runs on
	// bolt, while this replica leads on etcd. ctrl is the controller of the term in progress.
	// The regional load balancers (of the fleets served regionally) are configured by the
	// replica that leads, from the store; the probes of their regions run in every replica and
	// probe what the regional configurer last saw (nothing on a replica that never led).
	// The front door (where a provider runs one) serves the fleets served regionally, from the
	// regional load balancers the regional configurer reached; it follows each pass of it.
	var door *front.Sync
	regional := regionlb.New(regionlb.Options{Providers: providers, Logger: log, Applied: func() { door.Kick() }})
	door = front.NewSync(front.SyncOptions{Providers: providers, Regions: regional.Balancers, Logger: log})
	// The round trip from each client network to each region, as the regions' load balancers
	// measure it: what a latency-based answer ranks regions by.
	rtts := rtt.New(rtt.Options{Sources: regional.RTTSources, Logger: log})
	// Load and revision figures come from the load balancers that carry each fleet's traffic:
	// the regional ones for fleets served regionally, the embedded one for the others.
	figures := lbmonitor.Figures{Embedded: monitor, Regional: regional}
	// A region whose reachability changes has its fleets reconciled at once by the controller
	// of the term in progress.
	var lead *leading
	regions, err := newRegionChecker(regional, providers, log, func(region string) {
		if c := lead.current(); c != nil {
			c.RegionChanged(region)
		}
	})
	if err != nil {
		return err
	}
	chaosEngine, err := chaos.New(chaos.Options{Store: st, Providers: providers, Events: recorder, Logger: log,
		Pausers: []chaos.HealthPauser{targets, regional}})
	if err != nil {
		return err
	}
	ctrl := &leading{log: log, deps: termDeps{store: st, providers: providers, targets: targets,
		inTerm: []func(context.Context) error{
			func(ctx context.Context) error { return regional.Run(ctx, st) },
			func(ctx context.Context) error { return door.Run(ctx, st) },
			chaosEngine.Run,
		},
		ctrl: controller.Options{Informer: cache, Logger: log, ResolveImage: resolve, Targets: targets, Health: monitor, Serving: figures, Stats: figures, Reachability: regions,
			Events: recorder, QueueMetrics: queueMetrics, ProviderCalls: decisions.ProviderCall}}}
	lead = ctrl
	// The agents of every serving instance are scraped: their CPU for fleets autoscaled on cpu,
	// and every instance's node figures for /metrics and herd top.
	agents, err := agentmetrics.New(agentmetrics.Options{Port: agent.DefaultPort, Logger: log, Targets: func() []agentmetrics.Target {
		serving := ctrl.ServingInstances()
		out := make([]agentmetrics.Target, 0, len(serving))
		for _, in := range serving {
			out = append(out, agentmetrics.Target{Fleet: in.Fleet, Region: in.Region, Revision: in.Revision, Instance: in.Name, Address: in.Address})
		}
		return out
	}})
	if err != nil {
		return err
	}
	// What herd top shows: the agents' figures and the load balancer's rates over a short window.
	// Sampled every second, so that the dashboard's charts move each second.
	usageSampler, err := usage.New(usage.Options{LB: balancer, Nodes: agents, Every: time.Second})
	if err != nil {
		return err
	}
	// herd's DNS answers from the store, the regions' reachability from the clients' side and
	// the round trips each regional load balancer measures to its client networks.
	routeTable := routes.NewLive(routes.LiveOptions{Informer: cache, Reach: regions, RTT: rtts,
		LB: lbAddresses{providers: providers, embedded: embeddedLBAddresses(opts.LBAddress)}})
	ctrl.deps.scaler = autoscaler.LoopOptions{Events: recorder, Load: figures, CPU: agents, Logger: log, Observer: decisions}

	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("--listen %s: %w (is another herd up running?)", opts.Listen, err)
	}
	url := "http://" + ln.Addr().String()
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	kubeLn, kubeProxy, err := listenKubeProxy(host)
	if err != nil {
		ln.Close()
		return err
	}
	api := apiserver.New(apiserver.Options{
		Store: st, Token: token, Logger: log, DefaultProvider: opts.Provider, Providers: []string{prov.Name()},
		Images:           imagepin.Resolver{Images: pinImages{images}, Imageless: imageless(providers)},
		ImageStore:       pinImages{images},
		OptionValidators: providersAs[provider.OptionsValidator](providers),
		KubeAccess:       providersAs[provider.KubeAccessor](providers),
		KubeProxy:        kubeProxy,
		Events:           recorder,
		LBHealth:         targets.Health,
		Usage:            usageSampler.Report,
		Metrics:          cpmetrics.Handler(log, balancer.Collector(), cpmetrics.New(ctrl, st, targets.Health), agents.Collector(), queueMetrics, decisions, regions.Collector()),
		Chaos:            chaosEngine.Handler(),
		RegionLBs:        func() []apiserver.RegionLB { return regionLBs(regional) },
		Routes:           routeTable.Table,
		ClientRTTs:       func() []apiserver.ClientRTT { return clientRTTs(rtts) },
		Front:            func() apiserver.FrontDoor { return frontDoor(door) },
		Status: func() map[string]string {
			s := map[string]string{"store": "ok", "provider": prov.Name()}
			ctrl.status(s)
			return s
		},
	})
	// The dashboard serves /ui and hands everything else to the API.
	dashboard := web.New(web.Options{Store: st, Token: token, API: api, LBHealth: targets.Health, Usage: usageSampler, Logger: log,
		TokenFile: tokenFile(st, opts.DataDir), ConfigFile: opts.ConfigPath})
	srv := &http.Server{
		Handler:           dashboard,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	srv.RegisterOnShutdown(dashboard.Close) // ends the dashboard's streams, which would hold Shutdown
	if es, ok := st.(*etcd.Store); ok {
		if err := ctrl.campaign(es, opts, url); err != nil {
			ln.Close()
			kubeLn.Close()
			return err
		}
	}
	var serveDNS func(context.Context) error
	if opts.DNS.Zone != "" {
		if serveDNS, err = startDNS(opts.DNS, routeTable.Table, recorder, log); err != nil {
			ln.Close()
			kubeLn.Close()
			return err
		}
	}
	listeners := []net.Listener{ln, kubeLn}
	if opts.APISocket != "" {
		sock, err := listenAPISocket(opts.APISocket)
		if err != nil {
			ln.Close()
			kubeLn.Close()
			return err
		}
		listeners = append(listeners, sock)
	}
	if err := client.AddServer(opts.ConfigPath, url, token); err != nil {
		for _, l := range listeners {
			l.Close()
		}
		return err
	}

	// The parts run in stages, stopped in reverse. The load balancer keeps serving its last
	// configuration whatever the controller does, and the event writer stores the events of the
	// last reconciles: both stop last, after the API has let requests in flight finish.
	var m manager
	m.stage(runnable{"load balancer", balancer.Start}, runnable{"events", recorder.Start})
	parts := []runnable{
		{"informer", cache.Start},
		{"routes", routeTable.Start},
		{"controller", ctrl.run},
		{"agent metrics", agents.Start},
		{"usage", usageSampler.Start},
		{"region probes", regions.Run},
		{"region round trips", rtts.Run},
	}
	if serveDNS != nil {
		parts = append(parts, runnable{"dns", serveDNS})
	}
	m.stage(parts...)
	m.stage(runnable{"api server", serveAPI(srv, listeners)})
	m.started = func() {
		log.Info("control plane up", "api", url, "dashboard", url+"/ui/", "kube_proxy", kubeProxy.URL, "data_dir", opts.DataDir, "client_config", opts.ConfigPath, "provider", prov.Name())
		if opts.Ready != nil {
			opts.Ready(url)
		}
	}
	m.stopping = func() { log.Info("shutting down") }
	err = m.run(ctx)
	log.Info("stopped")
	return err
}

// serveAPI serves the API on every listener until ctx ends, then shuts the server down, letting
// requests in flight finish for up to 10 s. A listener that fails stops it with the error.
func serveAPI(srv *http.Server, listeners []net.Listener) func(context.Context) error {
	return func(ctx context.Context) error {
		errc := make(chan error, len(listeners))
		for _, l := range listeners {
			go func() {
				if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
					errc <- err
					return
				}
				errc <- nil
			}()
		}
		var err error
		select {
		case <-ctx.Done():
		case err = <-errc:
		}
		shutCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		_ = srv.Shutdown(shutCtx)
		return err
	}
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
