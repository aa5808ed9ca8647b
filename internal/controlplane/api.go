// The API server part: the API and the dashboard, served on the API's address, the Kubernetes
// proxy's TLS listener and the optional unix socket.

package controlplane

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/cpmetrics"
	"herd.dev/herd/internal/imagepin"
	"herd.dev/herd/internal/provider"
	"herd.dev/herd/internal/web"
)

// apiServer serves one handler on every listener of the API.
type apiServer struct {
	url       string
	kubeProxy *apiserver.KubeProxy
	listeners []net.Listener
	srv       *http.Server
}

// listenAPI opens the API's listeners: --listen, the Kubernetes proxy's on the same host, and
// --api-socket when set. On failure it closes those it opened.
func listenAPI(opts Options) (*apiServer, error) {
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("--listen %s: %w (is another herd up running?)", opts.Listen, err)
	}
	a := &apiServer{url: "http://" + ln.Addr().String(), listeners: []net.Listener{ln}}
	host, _, _ := net.SplitHostPort(ln.Addr().String())
	kubeLn, kubeProxy, err := listenKubeProxy(host)
	if err != nil {
		a.close()
		return nil, err
	}
	a.kubeProxy = kubeProxy
	a.listeners = append(a.listeners, kubeLn)
	if opts.APISocket != "" {
		sock, err := listenAPISocket(opts.APISocket)
		if err != nil {
			a.close()
			return nil, err
		}
		a.listeners = append(a.listeners, sock)
	}
	return a, nil
}

// serve sets the handler Start serves.
func (a *apiServer) serve(h *web.Handler, log *slog.Logger) {
	a.srv = &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	a.srv.RegisterOnShutdown(h.Close) // ends the dashboard's streams, which would hold Shutdown
}

// Start serves on every listener until ctx ends, then shuts the server down, letting requests in
// flight finish for up to 10 s. A listener that fails stops it with the error.
func (a *apiServer) Start(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, l := range a.listeners {
		g.Go(func() error {
			if err := a.srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		})
	}
	g.Go(func() error {
		<-gctx.Done()
		shutCtx, done := context.WithTimeout(context.Background(), 10*time.Second)
		defer done()
		_ = a.srv.Shutdown(shutCtx)
		return nil
	})
	return g.Wait()
}

// close closes the listeners; those the server served are closed already, and stay so.
func (a *apiServer) close() {
	for _, l := range a.listeners {
		_ = l.Close()
	}
}

// handler is the dashboard, which serves /ui and hands everything else to the API.
func (p *parts) handler() *web.Handler {
	api := apiserver.New(apiserver.Options{
		Store: p.st, Token: p.token, Logger: p.log, DefaultProvider: p.opts.Provider, Providers: slices.Sorted(maps.Keys(p.providers)),
		Images:           imagepin.Resolver{Images: pinImages{p.images}, Imageless: imageless(p.providers)},
		ImageStore:       pinImages{p.images},
		OptionValidators: providersAs[provider.OptionsValidator](p.providers),
		KubeAccess:       providersAs[provider.KubeAccessor](p.providers),
		KubeProxy:        p.api.kubeProxy,
		Events:           p.recorder,
		LBHealth:         p.targets.Health,
		Usage:            p.usage.Report,
		Metrics: cpmetrics.Handler(p.log, p.balancer.Collector(), cpmetrics.New(p.lead, p.st, p.targets.Health), p.agents.Collector(),
			p.queueMetrics, p.decisions, p.regions.Collector(), p.edges),
		Chaos:      p.chaos.Handler(),
		RegionLBs:  func() []apiserver.RegionLB { return regionLBs(p.regional) },
		Routes:     p.routes.Table,
		ClientRTTs: func() []apiserver.ClientRTT { return clientRTTs(p.rtts) },
		Front:      func() apiserver.FrontDoor { return frontDoor(p.door) },
		Orphans:    p.lead.Orphans,
		Edges:      p.edges,
		Peers:      p.lead.peers,
		Status:     p.status,

		DiscoveryZone: p.opts.DiscoveryZone,
	})
	return web.New(web.Options{Store: p.st, Token: p.token, API: api, LBHealth: p.targets.Health, Usage: p.usage, Logger: p.log,
		TokenFile: tokenFile(p.st, p.opts.DataDir), ConfigFile: p.opts.ConfigPath})
}

// status is what /v1/status says.
func (p *parts) status() map[string]string {
	s := map[string]string{"store": "ok", "provider": p.prov.Name()}
	p.lead.status(s)
	return s
}
