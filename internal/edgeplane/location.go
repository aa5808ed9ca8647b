package edgeplane

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/edge"
	"herd.dev/herd/internal/localca"
)

// OriginResolver gives the URL of an origin: its url, or where its fleet's listener is served.
type OriginResolver func(v1alpha1.EdgeOrigin) (*url.URL, error)

// LocationOptions are what a Location needs besides its Distribution.
type LocationOptions struct {
	// Origins resolves the Distribution's origins. Default: URLs only.
	Origins OriginResolver
	// LocalCA issues the certificates of listeners with tls.localCA, and is trusted, besides the
	// system's roots, for https origins. Default: none (such a listener fails to start).
	LocalCA *localca.CA
	// DataDir holds the disk tier of a Distribution with spec.diskCacheSize, under edge/NAME.
	// Default: none (such a Distribution fails to start).
	DataDir string
	Logger  *slog.Logger
}

// Location is one edge location: an edge.Edge served on a Distribution's listeners.
type Location struct {
	opts LocationOptions
	log  *slog.Logger
	name string
	edge *edge.Edge

	mu        sync.Mutex
	listeners map[string]*served // by listenerKey
	status    v1alpha1.DistributionStatus
}

// served is one listener's server.
type served struct {
	name string
	srv  *edge.Server
	addr string
}

// NewLocation starts serving d (defaulted and validated). What it could not start (a listener
// whose port is taken) is in the returned error and in Status; the rest serves.
func NewLocation(d *v1alpha1.Distribution, o LocationOptions) (*Location, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Origins == nil {
		o.Origins = URLOrigins
	}
	cfg, err := edge.FromDistribution(d, o.Origins)
	if err != nil {
		return nil, err
	}
	cfg.Transport = edge.NewTransport(rootCAs(o.LocalCA))
	cfg.MetricLabels = prometheus.Labels{"distribution": d.Metadata.Name}
	if d.Spec.DiskCacheSize > 0 {
		if o.DataDir == "" {
			return nil, errors.New("spec.diskCacheSize needs a data directory for the disk tier, which this process has none of")
		}
		cfg.DiskDir = filepath.Join(o.DataDir, "edge", d.Metadata.Name)
	}
	log := o.Logger.With("component", "edge", "distribution", d.Metadata.Name)
	e, err := edge.New(cfg, log)
	if err != nil {
		return nil, err
	}
	l := &Location{opts: o, log: log, name: d.Metadata.Name, edge: e, listeners: map[string]*served{}}
	return l, l.listen(d)
}

// URLOrigins resolves origins given by URL, and refuses those that name a fleet.
func URLOrigins(eo v1alpha1.EdgeOrigin) (*url.URL, error) {
	if eo.URL == "" {
		return nil, fmt.Errorf("origin %s names fleet %s, and no fleet is known here", eo.Name, eo.Fleet)
	}
	return url.Parse(eo.URL)
}

// FleetOrigin is where a load balancer at lbAddress serves the fleet listener an origin names:
// eo.Listener, or the fleet's first http listener.
func FleetOrigin(fleet string, listeners []v1alpha1.Listener, eo v1alpha1.EdgeOrigin, lbAddress string) (*url.URL, error) {
	for _, l := range listeners {
		if l.Protocol == v1alpha1.ProtocolTCP || (eo.Listener != "" && l.Name != eo.Listener) {
			continue
		}
		scheme := "http"
		if l.TLS != nil {
			scheme = "https"
		}
		return &url.URL{Scheme: scheme, Host: net.JoinHostPort(lbAddress, strconv.Itoa(int(l.Port)))}, nil
	}
	if eo.Listener != "" {
		return nil, fmt.Errorf("fleet %s has no http listener named %q", fleet, eo.Listener)
	}
	return nil, fmt.Errorf("fleet %s has no http listener", fleet)
}

// rootCAs are the system's roots and herd's local CA, or nil (the system's) without one.
func rootCAs(ca *localca.CA) *x509.CertPool {
	if ca == nil {
		return nil
	}
	pem, err := os.ReadFile(ca.CertFile())
	if err != nil {
		return nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(pem)
	return pool
}

// Edge is the location's cache, for its metrics, figures and invalidations.
func (l *Location) Edge() *edge.Edge { return l.edge }

// Status says where each listener serves, or why it does not.
func (l *Location) Status() v1alpha1.DistributionStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.status
}

// Apply reconfigures the location for d, a new version of its Distribution: behaviors and origins
// at once, listeners added, changed or removed one by one; the cache is kept.
func (l *Location) Apply(d *v1alpha1.Distribution) error {
	cfg, err := edge.FromDistribution(d, l.opts.Origins)
	if err != nil {
		return err
	}
	if err := l.edge.Reconfigure(cfg); err != nil {
		return err
	}
	return l.listen(d)
}

// listenerKey changes whenever anything a listener's server is made from changes.
func listenerKey(el v1alpha1.EdgeListener) string {
	b, _ := json.Marshal(el)
	return string(b)
}

// listen makes the listeners serve what d lists: those it no longer lists, or lists changed, are
// shut down, and the new ones opened.
func (l *Location) listen(d *v1alpha1.Distribution) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	want := map[string]v1alpha1.EdgeListener{}
	for _, el := range d.Spec.Listeners {
		want[listenerKey(el)] = el
	}
	for key, s := range l.listeners {
		if _, ok := want[key]; !ok {
			l.shutdown(s)
			delete(l.listeners, key)
		}
	}
	var errs []error
	status := v1alpha1.DistributionStatus{}
	for _, el := range d.Spec.Listeners {
		key := listenerKey(el)
		s, ok := l.listeners[key]
		if !ok {
			var err error
			if s, err = l.open(el); err != nil {
				errs = append(errs, fmt.Errorf("listener %s: %w", el.Name, err))
				status.Listeners = append(status.Listeners, v1alpha1.EdgeListenerStatus{Name: el.Name, Error: err.Error()})
				continue
			}
			l.listeners[key] = s
		}
		status.Listeners = append(status.Listeners, v1alpha1.EdgeListenerStatus{Name: el.Name, Address: s.addr})
	}
	l.status = status
	return errors.Join(errs...)
}

// open starts serving one listener.
func (l *Location) open(el v1alpha1.EdgeListener) (*served, error) {
	opts := serverOptions(l.edge, l.log)
	if el.TLS != nil {
		cfg, err := l.tlsConfig(el)
		if err != nil {
			return nil, err
		}
		opts.TLS = cfg
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(el.Address, strconv.Itoa(int(el.Port))))
	if err != nil {
		return nil, err
	}
	srv := edge.NewServer(l.edge, opts)
	s := &served{name: el.Name, srv: srv, addr: ln.Addr().String()}
	go func() {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			l.log.Error("edge listener stopped", "listener", el.Name, "err", err)
		}
	}()
	l.log.Info("edge listening", "listener", el.Name, "address", s.addr)
	return s, nil
}

// tlsConfig is an HTTPS listener's configuration: its certificate files, or one from the local CA.
func (l *Location) tlsConfig(el v1alpha1.EdgeListener) (*tls.Config, error) {
	certFile, keyFile := el.TLS.CertFile, el.TLS.KeyFile
	if el.TLS.LocalCA {
		if l.opts.LocalCA == nil {
			return nil, errors.New("tls.localCA needs herd's local CA, which this process has not opened")
		}
		var err error
		if certFile, keyFile, err = l.opts.LocalCA.Ensure("edge-"+el.Name, []string{"localhost", "127.0.0.1", el.Address}); err != nil {
			return nil, err
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}, nil
}

// shutdown stops a listener, letting the requests in flight finish for a few seconds.
func (l *Location) shutdown(s *served) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil {
		s.srv.Close()
	}
	l.log.Info("edge listener stopped", "listener", s.name, "address", s.addr)
}

// Close stops every listener.
func (l *Location) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	var wg sync.WaitGroup
	for key, s := range l.listeners {
		wg.Go(func() { l.shutdown(s) })
		delete(l.listeners, key)
	}
	wg.Wait()
	l.edge.Close()
}
