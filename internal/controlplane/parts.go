package controlplane

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/agent"
	"herd.dev/herd/internal/agentauth"
	"herd.dev/herd/internal/agentmetrics"
	"herd.dev/herd/internal/autoscaler"
	"herd.dev/herd/internal/chaos"
	"herd.dev/herd/internal/controller"
	"herd.dev/herd/internal/cpmetrics"
	"herd.dev/herd/internal/edgeplane"
	"herd.dev/herd/internal/events"
	"herd.dev/herd/internal/global/front"
	"herd.dev/herd/internal/global/health"
	"herd.dev/herd/internal/global/route53sync"
	"herd.dev/herd/internal/global/routes"
	"herd.dev/herd/internal/global/rtt"
	"herd.dev/herd/internal/image"
	"herd.dev/herd/internal/informer"
	"herd.dev/herd/internal/lb"
	"herd.dev/herd/internal/lbmonitor"
	"herd.dev/herd/internal/lbsync"
	"herd.dev/herd/internal/localca"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/regionlb"
	"herd.dev/herd/internal/regionnet"
	"herd.dev/herd/internal/store"
	"herd.dev/herd/internal/store/etcd"
	"herd.dev/herd/internal/usage"
)

// parts are the parts of herd up, built in the order they use each other by build; Run runs
// them. A part that needs one built after it (the region probes tell the controller of the term
// in progress of a change) reaches it through a method of parts, called only once they all run.
type parts struct {
	opts Options
	log  *slog.Logger
	st   store.Store

	token     string
	prov      provider.Provider
	providers map[string]provider.Provider
	// networks are the providers' regions' networks (regionNetworks), asked for once.
	networks map[string]regionnet.Networks
	images   *image.Store
	// cache is the one cache of fleets and instances that the controller and the routes follow.
	cache *informer.Informer
	// localCA issues the certificates of listeners with tls.localCA, for every load balancer.
	localCA *localca.CA

	// The embedded load balancer and what keeps it configured and watched.
	balancer *lb.LB
	targets  *lbsync.Sync
	monitor  *lbmonitor.Monitor
	// edges run one edge location per Distribution, in every replica.
	edges *edgeplane.Set

	recorder     *events.Recorder
	decisions    *cpmetrics.Decisions
	queueMetrics *cpmetrics.QueueMetrics

	// Global routing: the regional load balancers, the front door, the round trips from the
	// client networks, the regions' reachability.
	regional *regionlb.Regional
	door     *front.Sync
	rtts     *rtt.Collector
	regions  *health.Checker
	chaos    *chaos.Engine

	agents *agentmetrics.Scraper
	// agentKeys give each instance's agent its credential, which herd up's requests to it carry.
	agentKeys *agentauth.Keyring
	usage     *usage.Sampler
	lead      *leading
	routes    *routes.Live

	api *apiServer
	dns *dnsServer // nil without --dns-zone
	// discovery answers the discovery zone to the instances; nil without --discovery-listen
	discovery *dnsServer
	route53   *route53sync.Syncer // nil without --route53-zone
}

// build builds every part. What it opened (the API's and the DNS server's sockets) is closed by
// close, whether build failed or not.
func (p *parts) build(ctx context.Context, newProvider func(dataDir string, log *slog.Logger) (provider.Provider, error)) error {
	var err error
	if p.token, err = apiToken(ctx, p.st, filepath.Join(p.opts.DataDir, "token")); err != nil {
		return err
	}
	if p.prov, err = newProvider(p.opts.DataDir, p.log); err != nil {
		return fmt.Errorf("provider %s: %w", p.opts.Provider, err)
	}
	p.providers = map[string]provider.Provider{p.prov.Name(): p.prov}
	if err := withAWS(p.providers, p.opts.DataDir, p.log); err != nil {
		return err
	}
	p.networks = regionNetworks(p.providers)
	p.images = image.NewStore(image.StoreDir(p.opts.DataDir))
	p.cache = informer.New(informer.Options{Store: p.st, Logger: p.log})
	if err := p.buildDataPlane(); err != nil {
		return err
	}
	if err := p.buildGlobal(); err != nil {
		return err
	}
	if err := p.buildNodeMetrics(); err != nil {
		return err
	}
	p.buildLeading()
	// herd's DNS answers from the store, the regions' reachability from the clients' side and
	// the round trips each regional load balancer measures to its client networks.
	lbs := lbAddresses{networks: p.networks, embedded: embeddedLBAddresses(p.opts.LBAddress)}
	inside := newInstanceLBAddresses(lbs, p.providers, p.opts.LBAddress)
	p.routes = routes.NewLive(routes.LiveOptions{Informer: p.cache, Reach: p.regions, RTT: p.rtts,
		LB: lbs, InstanceLB: inside, Regional: regionlb.ServedRegionally, EmbeddedLB: inside.embedded(),
		DiscoveryZone: cmp.Or(p.opts.DiscoveryZone, v1alpha1.DefaultDiscoveryZone), DiscoveryHTTPPort: p.discoveryHTTP().Port})
	if p.api, err = listenAPI(p.opts); err != nil {
		return err
	}
	p.api.serve(p.handler(), p.log)
	if es, ok := p.st.(*etcd.Store); ok {
		if err := p.lead.campaign(es, p.opts, p.api.url); err != nil {
			return err
		}
	}
	if err := p.buildRoute53(ctx); err != nil {
		return err
	}
	if p.opts.DNS.Zone != "" {
		if p.dns, err = listenDNS(p.opts.DNS, p.routes.Table, p.recorder, p.log); err != nil {
			return err
		}
	}
	if p.opts.DiscoveryListen != "" {
		opts := DNSOptions{Zone: cmp.Or(p.opts.DiscoveryZone, v1alpha1.DefaultDiscoveryZone), Listen: p.opts.DiscoveryListen, Discovery: true}
		if p.discovery, err = listenDNS(opts, p.routes.Table, p.recorder, p.log); err != nil {
			return err
		}
		if err := tellDiscovery(p.providers, opts.Zone, p.discovery.l.Addr()); err != nil {
			return err
		}
	}
	return nil
}

// close closes the sockets that serving has not closed: all of them when Run fails before.
func (p *parts) close() {
	if p.api != nil {
		p.api.close()
	}
	if p.dns != nil {
		p.dns.close()
	}
	if p.discovery != nil {
		p.discovery.close()
	}
}

// buildDataPlane builds the embedded load balancer, its configurer (the controller's target
// sink) and its monitor, the local CA of HTTPS listeners, and the event writer.
func (p *parts) buildDataPlane() error {
	p.balancer = lb.New(lb.Options{Logger: p.log})
	p.targets = lbsync.New(p.balancer, p.opts.LBAddress, p.log)
	ca, err := localca.Open(localca.Dir(p.opts.DataDir))
	if err != nil {
		return err
	}
	p.localCA = ca
	p.targets.UseLocalCA(ca)
	if err := p.checkDiscoveryHTTP(); err != nil {
		return err
	}
	p.targets.SetDiscovery(p.discoveryHTTP())
	p.edges = edgeplane.NewSet(edgeplane.SetOptions{Store: p.st, LBAddress: p.opts.LBAddress, LocalCA: ca, DataDir: p.opts.DataDir, Logger: p.log})
	// The monitor gives the controller the load balancer's view: health and error rates for
	// self-healing, load for autoscaling.
	p.monitor = lbmonitor.New(p.balancer, lbmonitor.Options{RegionOf: p.targets.RegionOf})
	p.decisions = cpmetrics.NewDecisions()
	p.recorder = events.New(events.Options{Store: p.st, Logger: p.log, Recorded: p.decisions.Event})
	p.queueMetrics = cpmetrics.NewQueueMetrics()
	return nil
}

// buildGlobal builds the parts of global routing and the chaos engine.
func (p *parts) buildGlobal() error {
	// The regional load balancers (of the fleets served regionally) are configured by the
	// replica that leads, from the store; the probes of their regions run in every replica and
	// probe what the regional configurer last saw (nothing on a replica that never led).
	// The front door (where a provider runs one) serves the fleets served regionally, from the
	// regional load balancers the regional configurer reached; it follows each pass of it.
	p.regional = regionlb.New(regionlb.Options{Networks: p.networks, Logger: p.log, LocalCA: p.localCA, Applied: p.regionalApplied,
		Discovery: p.discoveryHTTP()})
	p.door = front.NewSync(front.SyncOptions{Networks: p.networks, Regions: p.regional.Balancers, Logger: p.log})
	// The round trip from each client network to each region, as the regions' load balancers
	// measure it: what a latency-based answer ranks regions by.
	p.rtts = rtt.New(rtt.Options{Sources: p.regional.RTTSources, Logger: p.log})
	var err error
	if p.regions, err = newRegionChecker(p.regional, p.networks, p.log, p.regionChanged); err != nil {
		return err
	}
	p.chaos, err = chaos.New(chaos.Options{Store: p.st, Providers: p.providers, Networks: regionChaos(p.networks), Events: p.recorder, Logger: p.log,
		Pausers: []chaos.HealthPauser{p.targets, p.regional}})
	return err
}

// regionalApplied tells the front door of each pass of the regional configurer.
func (p *parts) regionalApplied() { p.door.Kick() }

// regionChanged has the fleets of a region whose reachability changed reconciled at once, by the
// controller of the term in progress.
func (p *parts) regionChanged(region string) {
	if c := p.lead.current(); c != nil {
		c.RegionChanged(region)
	}
}

// buildNodeMetrics builds the scraper of the instances' agents and what herd top shows.
func (p *parts) buildNodeMetrics() error {
	// The agents of every serving instance are scraped: their CPU for fleets autoscaled on cpu,
	// and every instance's node figures for /metrics and herd top.
	keys, err := agentauth.Open(p.opts.DataDir)
	if err != nil {
		return err
	}
	p.agentKeys = keys
	if p.agents, err = agentmetrics.New(agentmetrics.Options{Port: agent.DefaultPort, Logger: p.log, Targets: p.scrapeTargets, Credential: keys.Credential}); err != nil {
		return err
	}
	// What herd top shows: the agents' figures and the load balancer's rates over a short window.
	// Sampled every second, so that the dashboard's charts move each second.
	p.usage, err = usage.New(usage.Options{LB: p.balancer, Nodes: p.agents, Every: time.Second})
	return err
}

// scrapeTargets are the instances the controller of the term in progress serves.
func (p *parts) scrapeTargets() []agentmetrics.Target {
	serving := p.lead.ServingInstances()
	out := make([]agentmetrics.Target, 0, len(serving))
	for _, in := range serving {
		out = append(out, agentmetrics.Target{Fleet: in.Fleet, Region: in.Region, Revision: in.Revision, Instance: in.Name, Address: in.Address})
	}
	return out
}

// buildLeading builds what runs the controller and the autoscaler in terms (leading.go): for as
// long as herd up runs on bolt, while this replica leads on etcd.
func (p *parts) buildLeading() {
	// Load and revision figures come from the load balancers that carry each fleet's traffic:
	// the regional ones for fleets served regionally, the embedded one for the others.
	figures := lbmonitor.Figures{Embedded: p.monitor, Regional: p.regional}
	p.lead = &leading{log: p.log, deps: termDeps{store: p.st, providers: p.providers, targets: p.targets, claims: p.balancer.SetTenantClaimer,
		inTerm: []func(context.Context) error{
			func(ctx context.Context) error { return p.regional.Run(ctx, p.cache) },
			func(ctx context.Context) error { return p.door.Run(ctx, p.cache) },
			p.chaos.Run,
		},
		ctrl: controller.Options{Informer: p.cache, Logger: p.log, ResolveImage: p.resolveImage, Targets: p.targets, Health: p.monitor,
			Serving: figures, Stats: figures, Reachability: p.regions, Events: p.recorder, QueueMetrics: p.queueMetrics,
			ProviderCalls: p.decisions.ProviderCall, OrphanGrace: p.opts.OrphanGrace, KeepOrphans: p.opts.KeepOrphans, Orphans: p.decisions,
			TenantActivity: p.balancer},
		scaler: autoscaler.LoopOptions{Events: p.recorder, Load: figures, CPU: p.agents, Logger: p.log, Observer: p.decisions},
	}}
}

// resolveImage gives the controller an image's digest in herd's image store.
func (p *parts) resolveImage(ref string) (string, error) {
	digest, err := p.images.Resolve(ref)
	if errors.Is(err, image.ErrNotFound) {
		return ref, nil // the provider reports a missing image on create, with the fix
	}
	return digest, err
}

// running are the parts that run between the load balancer and the event writer (started first,
// stopped last) and the API server (started last, stopped first).
func (p *parts) running() []runnable {
	out := []runnable{
		{"informer", p.cache.Start},
		{"routes", p.routes.Start},
		{"controller", p.lead.run},
		{"agent metrics", p.agents.Start},
		{"usage", p.usage.Start},
		{"region probes", p.regions.Run},
		{"region round trips", p.rtts.Run},
		{"edge locations", p.edges.Run},
	}
	if p.discovery != nil {
		out = append(out, runnable{"discovery-dns", p.discovery.Start})
	}
	if p.dns != nil {
		out = append(out, runnable{"dns", p.dns.Start})
	}
	if p.route53 != nil {
		out = append(out, runnable{"route53", p.route53.Run})
	}
	return out
}
