package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/global/dns"
	"herd.dev/herd/internal/global/routes"
)

// dnsFlags are the flags that configure herd's DNS server, shared by `herd dns` and `herd up`.
type dnsFlags struct {
	zone        string
	listen      string
	nameservers []string
	maxUDP      int
	prefix      string
}

// register adds the flags, each name after prefix ("dns-" in herd up, "" in herd dns).
func (f *dnsFlags) register(cmd *cobra.Command, prefix, zoneHelp string) {
	f.prefix = prefix
	cmd.Flags().StringVar(&f.zone, prefix+"zone", "", zoneHelp)
	cmd.Flags().StringVar(&f.listen, prefix+"listen", "127.0.0.1:5353", "UDP and TCP address of the DNS server")
	cmd.Flags().StringSliceVar(&f.nameservers, prefix+"nameserver", nil, `the zone's NS records, NAME or NAME=ADDRESS (glue for a name in the zone); default "ns1.<zone>"`)
	cmd.Flags().IntVar(&f.maxUDP, prefix+"max-udp-size", dns.DefaultMaxUDPSize, "largest EDNS0 buffer size honoured over UDP; larger answers are truncated and retried over TCP")
}

// nameserverList parses the nameserver flags.
func (f *dnsFlags) nameserverList() ([]dns.Nameserver, error) {
	var ns []dns.Nameserver
	for _, v := range f.nameservers {
		name, addr, hasAddr := strings.Cut(v, "=")
		n := dns.Nameserver{Name: name}
		if hasAddr {
			a, err := netip.ParseAddr(addr)
			if err != nil {
				return nil, fmt.Errorf("--%snameserver %q: the address after '=' must be an IP address, e.g. ns1.herd.test=10.0.0.53", f.prefix, v)
			}
			n.Addresses = []netip.Addr{a}
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// options returns the flags as the control plane's DNS options.
func (f *dnsFlags) options() (controlplane.DNSOptions, error) {
	ns, err := f.nameserverList()
	return controlplane.DNSOptions{Zone: f.zone, Listen: f.listen, Nameservers: ns, MaxUDPSize: f.maxUDP}, err
}

// server returns the DNS server and its listener.
func (f *dnsFlags) server(log *slog.Logger) (*dns.Server, *dns.Listener, error) {
	ns, err := f.nameserverList()
	if err != nil {
		return nil, nil, err
	}
	s, err := dns.New(dns.Options{Zone: f.zone, Nameservers: ns, MaxUDPSize: f.maxUDP, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("--%szone: %w", f.prefix, err)
	}
	l, err := dns.Listen(f.listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--%slisten: %w", f.prefix, err)
	}
	return s, l, nil
}

// newDNSCmd is `herd dns`: herd's authoritative DNS server alone, following a control plane's
// routes, so that it can run in every region as Route 53's name servers run everywhere.
func newDNSCmd(g *globals) *cobra.Command {
	var f dnsFlags
	var server, routesFile string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "dns",
		Short: "Run herd's authoritative DNS server alone, in the foreground",
		Long: `Run herd's authoritative DNS server for --zone until Ctrl-C or SIGTERM. It answers each
fleet's spec.global.hostname with the load balancers of the regions the fleet's policy picks
among the healthy ones (see docs/global-routing.md).

It follows GET /v1/routes of the control plane (--server, default the client config's, with the
config's token) every --interval. When the control plane cannot be reached it keeps answering
from the last routes it had. --routes-file serves a fixed routes table (the JSON of
'herd get routes -o json') instead, without a control plane.

'herd up --dns-zone' runs the same server inside the control plane.`,
		Example: `  herd dns --zone herd.test. --listen 0.0.0.0:53
  herd dns --zone herd.test. --listen 10.216.0.9:53 --server http://10.213.0.1:7443
  herd dns --zone herd.test. --listen 10.216.1.1:53 --server unix:///var/lib/herd/api.sock
  dig @127.0.0.1 -p 5353 hello.herd.test
  herd dns export hello > hello-route53.json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.zone == "" {
				return fmt.Errorf("--zone is required: the zone to serve, e.g. --zone herd.test.")
			}
			if server != "" && routesFile != "" {
				return fmt.Errorf("--server and --routes-file exclude each other: follow a control plane or serve a file")
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			var fetch func(context.Context) (routes.Table, error)
			if routesFile != "" {
				table, err := readRoutesFile(routesFile)
				if err != nil {
					return err
				}
				fetch = func(context.Context) (routes.Table, error) { return table, nil }
			} else {
				c, err := g.client()
				if err != nil {
					return fmt.Errorf("%w (the token comes from the client config; --config to choose one)", err)
				}
				if server != "" {
					c = c.WithServer(server)
				}
				fetch = c.Routes
			}
			log = log.With("component", "dns")
			s, l, err := f.server(log)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			fmt.Fprintf(g.errOut, "herd dns: serving %s on %s (udp and tcp)\n", s.Zone(), l.Addr())
			go dns.Follow(ctx, s, fetch, interval, log)
			return s.Serve(ctx, l)
		},
	}
	f.register(cmd, "", "the zone to serve, e.g. herd.test. (required)")
	cmd.Flags().StringVar(&server, "server", "", "control plane URL to follow; default: the client config's servers")
	cmd.Flags().StringVar(&routesFile, "routes-file", "", "serve this routes table (JSON) instead of following a control plane")
	cmd.Flags().DurationVar(&interval, "interval", 250*time.Millisecond, "how often the routes are fetched: a region's health change reaches the answers within this")
	cmd.AddCommand(newDNSExportCmd(g))
	return cmd
}

func readRoutesFile(path string) (routes.Table, error) {
	var t routes.Table
	data, err := os.ReadFile(path)
	if err != nil {
		return t, fmt.Errorf("--routes-file: %w", err)
	}
	if err := json.Unmarshal(data, &t); err != nil {
		return t, fmt.Errorf("--routes-file %s: not a routes table (the JSON of 'herd get routes -o json'): %w", path, err)
	}
	return t, nil
}
