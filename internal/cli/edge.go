package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/edge"
	"herd.dev/herd/internal/kubebin"
	"herd.dev/herd/internal/localca"
)

// newEdgeCmd is `herd edge`: one edge location serving a Distribution.
func newEdgeCmd(g *globals) *cobra.Command {
	var file, metricsAddr, lbAddress, dataDir string
	cmd := &cobra.Command{
		Use:   "edge",
		Short: "Run an edge location (a caching, coalescing front) for a Distribution, in the foreground",
		Long: `Serve the Distribution of -f FILE until Ctrl-C or SIGTERM: its listeners take requests, its
behaviors cache them by the HTTP caching standard, and its origins answer the misses. An origin
that names a fleet is reached through herd up's load balancer at --lb-address on the fleet's
listener port (the fleet is read from herd up's API); an https listener of herd's local CA is
trusted through --data-dir's CA. Prometheus metrics are served on --metrics-addr at /metrics.`,
		Example: `  herd edge -f examples/hello/distribution.yaml
  curl -i http://127.0.0.1:8081/    # X-Cache: Miss, then Hit`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			if file == "" {
				return errors.New("-f is required: the Distribution to serve")
			}
			d, err := readDistribution(file)
			if err != nil {
				return err
			}
			return runEdge(cmd.Context(), g, log, d, edgeOptions{metricsAddr: metricsAddr, lbAddress: lbAddress, dataDir: dataDir})
		},
	}
	cmd.Flags().StringVarP(&file, "filename", "f", "", "the Distribution (YAML or JSON)")
	cmd.Flags().StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9464", `address of /metrics; "" turns it off`)
	cmd.Flags().StringVar(&lbAddress, "lb-address", "127.0.0.1", "address of herd up's load balancer, for origins that name a fleet")
	cmd.Flags().StringVar(&dataDir, "data-dir", controlplane.DefaultDataDir(), "herd up's data directory, for the local CA")
	return cmd
}

type edgeOptions struct {
	metricsAddr, lbAddress, dataDir string
	ready                           func(addrs map[string]string) // tests: the listeners' bound addresses
}

// readDistribution reads a file holding exactly one Distribution, validated and defaulted.
func readDistribution(file string) (*v1alpha1.Distribution, error) {
	data, err := readInput(file)
	if err != nil {
		return nil, err
	}
	docs, err := v1alpha1.DecodeAndValidate(data, "local", kubebin.Version)
	if err != nil {
		return nil, fmt.Errorf("%s is invalid:\n%w", file, err)
	}
	var found []*v1alpha1.Distribution
	for _, doc := range docs {
		if d, ok := doc.Object.(*v1alpha1.Distribution); ok {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		return nil, fmt.Errorf("%s holds %d Distributions: herd edge serves exactly one", file, len(found))
	}
	return found[0], nil
}

func runEdge(ctx context.Context, g *globals, log *slog.Logger, d *v1alpha1.Distribution, o edgeOptions) error {
	cfg, err := edge.FromDistribution(d, func(eo v1alpha1.EdgeOrigin) (*url.URL, error) {
		if eo.URL != "" {
			return url.Parse(eo.URL)
		}
		return fleetOrigin(ctx, g, eo, o.lbAddress)
	})
	if err != nil {
		return err
	}
	cfg.Transport, err = edgeTransport(o.dataDir)
	if err != nil {
		return err
	}
	e, err := edge.New(cfg, log)
	if err != nil {
		return err
	}
	servers := map[string]*http.Server{}
	listeners := map[string]net.Listener{}
	addrs := map[string]string{}
	defer func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}()
	for _, l := range d.Spec.Listeners {
		srv := &http.Server{Handler: e, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
		if l.TLS != nil {
			if srv.TLSConfig, err = edgeTLS(l, o.dataDir); err != nil {
				return fmt.Errorf("listener %s: %w", l.Name, err)
			}
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(l.Address, strconv.Itoa(int(l.Port))))
		if err != nil {
			return fmt.Errorf("listener %s: %w", l.Name, err)
		}
		if srv.TLSConfig != nil {
			ln = tls.NewListener(ln, srv.TLSConfig)
		}
		servers[l.Name], listeners[l.Name], addrs[l.Name] = srv, ln, ln.Addr().String()
	}
	if o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(e.Metrics())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		servers["metrics"], listeners["metrics"], addrs["metrics"] = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}, ln, ln.Addr().String()
	}
	grp, gctx := errgroup.WithContext(ctx)
	for name, srv := range servers {
		ln := listeners[name]
		delete(listeners, name) // Serve closes it
		grp.Go(func() error {
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("listener %s: %w", name, err)
			}
			return nil
		})
		log.Info("edge listening", "component", "edge", "distribution", d.Metadata.Name, "listener", name, "address", addrs[name])
	}
	if o.ready != nil {
		o.ready(addrs)
	}
	grp.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(gctx), 5*time.Second)
		defer cancel()
		for _, srv := range servers {
			srv.Shutdown(sctx)
		}
		return nil
	})
	return grp.Wait()
}

// fleetOrigin is where the load balancer serves a fleet's listener.
func fleetOrigin(ctx context.Context, g *globals, eo v1alpha1.EdgeOrigin, lbAddress string) (*url.URL, error) {
	c, err := g.client()
	if err != nil {
		return nil, fmt.Errorf("reading fleet %s needs herd up: %w", eo.Fleet, err)
	}
	f, err := c.GetFleet(ctx, eo.Fleet)
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", eo.Fleet, err)
	}
	for _, l := range f.Spec.Listeners {
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
		return nil, fmt.Errorf("fleet %s has no http listener named %q", eo.Fleet, eo.Listener)
	}
	return nil, fmt.Errorf("fleet %s has no http listener", eo.Fleet)
}

// edgeTransport sends origin requests, trusting herd's local CA besides the system's roots.
func edgeTransport(dataDir string) (http.RoundTripper, error) {
	pem, err := os.ReadFile(localca.CertFile(localca.Dir(dataDir)))
	if err != nil {
		return edge.NewTransport(nil), nil
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	pool.AppendCertsFromPEM(pem)
	return edge.NewTransport(pool), nil
}

// edgeTLS is an HTTPS listener's configuration: its certificate files, or one from herd's local CA.
func edgeTLS(l v1alpha1.EdgeListener, dataDir string) (*tls.Config, error) {
	certFile, keyFile := l.TLS.CertFile, l.TLS.KeyFile
	if l.TLS.LocalCA {
		ca, err := localca.Open(localca.Dir(dataDir))
		if err != nil {
			return nil, err
		}
		if certFile, keyFile, err = ca.Ensure("edge-"+l.Name, []string{"localhost", "127.0.0.1", l.Address}); err != nil {
			return nil, err
		}
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}, nil
}
