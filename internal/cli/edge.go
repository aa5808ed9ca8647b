package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/edgeplane"
	"herd.dev/herd/internal/kubebin"
	"herd.dev/herd/internal/localca"
)

// newEdgeCmd is `herd edge`: one edge location serving a Distribution, and the commands on the
// edge locations herd up runs.
func newEdgeCmd(g *globals) *cobra.Command {
	var file, metricsAddr, lbAddress, dataDir string
	cmd := &cobra.Command{
		Use:   "edge",
		Short: "Run an edge location (a caching, coalescing front) for a Distribution, in the foreground",
		Long: `Serve the Distribution of -f FILE until Ctrl-C or SIGTERM: its listeners take requests, its
behaviors cache them by the HTTP caching standard, and its origins answer the misses. An origin
that names a fleet is reached through herd up's load balancer at --lb-address on the fleet's
listener port (the fleet is read from herd up's API); an https listener of herd's local CA is
trusted through --data-dir's CA. Prometheus metrics are served on --metrics-addr at /metrics.

herd up runs an edge location of its own for every Distribution applied with herd apply;
herd edge invalidate and herd edge stats act on those.`,
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
	cmd.AddCommand(newEdgeInvalidateCmd(g), newEdgeStatsCmd(g))
	return cmd
}

func newEdgeInvalidateCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "invalidate DISTRIBUTION PATH...",
		Short: "Drop a distribution's cached objects whose paths match, at every edge location herd up runs",
		Long: `Drop the objects whose path (or path and query) matches one of the patterns, '*' standing for
any run of characters and '?' for one, at every edge location of the distribution; the next request
for them goes to the origin. It returns once the edge location of the herd up that answered has
done it; every other replica's does it as its watch of the store delivers the invalidation.`,
		Example: `  herd edge invalidate site '/images/*'
  herd edge invalidate site '/*'         # everything`,
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := edgeplane.CheckPaths(args[1:]); err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			res, err := c.Invalidate(cmd.Context(), args[0], args[1:])
			if err != nil {
				return err
			}
			fmt.Fprintf(g.out, "invalidation %s done in %s: %d objects dropped\n", res.ID, res.Took, res.Dropped)
			return nil
		},
	}
}

func newEdgeStatsCmd(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "stats DISTRIBUTION",
		Short: "Show a distribution's hit ratio, bytes served, origin offload and coalesced requests",
		Long: `Show the figures of the distribution's edge locations, added up over every herd up replica sharing
the store (LOCATIONS says how many), each counted since it started: the same counters as the
herd_edge_* metrics on each replica's /metrics. The hit ratio is the share of answers served from
the cache; the origin offload is the share of requests that made no origin request. A replica
whose figures could not be read is named on standard error.`,
		Example: `  herd edge stats site
  herd edge stats site -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			format, c, err := formatAndClient(g, output)
			if err != nil {
				return err
			}
			st, err := c.EdgeStats(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if format == "yaml" || format == "json" {
				return printObject(g.out, format, st)
			}
			for _, u := range st.Unreached {
				fmt.Fprintf(g.errOut, "warning: figures not read from %s\n", u)
			}
			s := st.Stats
			t := newTable(g.out, "DISTRIBUTION", "LOCATIONS", "REQUESTS", "HIT-RATIO", "BYTES-SERVED", "ORIGIN-OFFLOAD", "ORIGIN-REQUESTS", "COALESCED", "ORIGIN-ERRORS", "INVALIDATED")
			t.row(st.Distribution, st.Locations, s.Requests, fmt.Sprintf("%.3f", st.HitRatio), s.BytesServed, fmt.Sprintf("%.3f", st.OriginOffload),
				s.OriginRequests, s.Coalesced, s.OriginErrors, s.Invalidations)
			return t.flush()
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: yaml or json")
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
	ca, err := edgeCA(d, o.dataDir)
	if err != nil {
		return err
	}
	loc, err := edgeplane.NewLocation(d, edgeplane.LocationOptions{LocalCA: ca, DataDir: o.dataDir, Logger: log, Origins: func(eo v1alpha1.EdgeOrigin) (*url.URL, error) {
		if eo.URL != "" {
			return url.Parse(eo.URL)
		}
		c, err := g.client()
		if err != nil {
			return nil, fmt.Errorf("reading fleet %s needs herd up: %w", eo.Fleet, err)
		}
		f, err := c.GetFleet(ctx, eo.Fleet)
		if err != nil {
			return nil, fmt.Errorf("fleet %s: %w", eo.Fleet, err)
		}
		return edgeplane.FleetOrigin(eo.Fleet, f.Spec.Listeners, eo, o.lbAddress)
	}})
	if loc != nil {
		defer loc.Close()
	}
	if err != nil {
		return err
	}
	addrs := map[string]string{}
	for _, l := range loc.Status().Listeners {
		addrs[l.Name] = l.Address
	}
	var metrics *http.Server
	if o.metricsAddr != "" {
		reg := prometheus.NewRegistry()
		reg.MustRegister(loc.Edge().Metrics(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ln, err := net.Listen("tcp", o.metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		addrs["metrics"] = ln.Addr().String()
		metrics = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go metrics.Serve(ln)
		defer metrics.Close()
	}
	if o.ready != nil {
		o.ready(addrs)
	}
	<-ctx.Done()
	return nil
}

// edgeCA is herd's local CA in dataDir when a listener asks for one of its certificates or the CA
// is there (https origins behind herd's load balancer are trusted through it); nil otherwise.
func edgeCA(d *v1alpha1.Distribution, dataDir string) (*localca.CA, error) {
	need := false
	for _, l := range d.Spec.Listeners {
		need = need || (l.TLS != nil && l.TLS.LocalCA)
	}
	if _, err := os.Stat(localca.CertFile(localca.Dir(dataDir))); err != nil && !need {
		return nil, nil
	}
	return localca.Open(localca.Dir(dataDir))
}
