package cli

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/controlplane"
	"herd.dev/herd/internal/leader"
	"herd.dev/herd/internal/store/etcd"
)

func newUpCmd(g *globals) *cobra.Command {
	opts := controlplane.Options{}
	var etcdPasswordFile, orphans string
	var dns dnsFlags
	var route53Regions []string
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the control plane (store, API, controller, load balancer) in the foreground",
		Long: `Run herd's control plane in the foreground until Ctrl-C: the embedded store, the API on
localhost, the controller that keeps every fleet at its desired state, and the load balancer that
serves every fleet's listeners from its healthy instances. The API also serves Prometheus
metrics (the load balancer's and the controller's) at /metrics, behind the same token.

On first start it generates an API token and writes the client config (server address and token,
mode 0600) that the other commands read. Instances keep running when the control plane stops; the
next 'herd up' adopts them.

An instance a provider runs that no fleet owns (no record, and no fleet that would adopt it: left
by a process killed at the wrong moment, or a store restored from an older copy) is an orphan:
herd up reports it (an OrphanFound event; herd get instances --orphans) and deletes it once
--orphan-grace has passed, or only reports it with --orphans=keep.

With --store etcd, several 'herd up' replicas can share one etcd: every replica serves the API and
its own load balancer, and one at a time, elected through etcd, runs the controller. When the
leader dies, another takes over once its lease (--leader-lease-ttl) runs out. Replicas on one
machine need their own --listen and --lb-address (127.0.0.2, 127.0.0.3, ...) and the same
--data-dir (the local provider's instances live there); they share the API token, kept in etcd,
and each adds its address to the client config, whose client tries the others when one is down.`,
		Example: `  herd up
  herd up --provider fake --data-dir /tmp/herd --listen 127.0.0.1:0
  herd up --store etcd --etcd-endpoints http://127.0.0.1:2379,http://127.0.0.1:22379,http://127.0.0.1:32379

  # with herd's authoritative DNS for the fleets' spec.global hostnames (dig @127.0.0.1 -p 5353 ...)
  herd up --dns-zone herd.test. --dns-listen 127.0.0.1:5353

  # and a Route 53 hosted zone kept in step with it (credentials from the AWS SDK's chain)
  herd up --route53-zone Z0123456789ABCDEFGHIJ --route53-aws-region eu=eu-west-1,us=us-east-1

  # a second replica of the same control plane on this machine
  herd up --store etcd --etcd-endpoints ... --listen 127.0.0.1:7444 --lb-address 127.0.0.2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := etcdFlags(cmd, &opts, etcdPasswordFile); err != nil {
				return err
			}
			var err error
			if opts.KeepOrphans, err = keepOrphans(orphans); err != nil {
				return err
			}
			if opts.OrphanGrace <= 0 {
				return fmt.Errorf("--orphan-grace %s: give a duration above 0, such as 1m", opts.OrphanGrace)
			}
			if opts.DNS, err = dns.options(); err != nil {
				return err
			}
			if opts.Route53.AWSRegions, err = parseAWSRegions("--route53-aws-region", route53Regions); err != nil {
				return err
			}
			if opts.Route53.ZoneID == "" && (opts.Route53.Endpoint != "" || len(route53Regions) > 0) {
				return errors.New("--route53-endpoint and --route53-aws-region only apply with --route53-zone: give the hosted zone's ID")
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			opts.Logger = log
			opts.ConfigPath = g.configPath
			opts.Ready = func(url string) {
				fmt.Fprintf(g.out, "herd control plane serving at %s (client config %s); Ctrl-C stops it\n", url, g.configPath)
			}
			return controlplane.Run(cmd.Context(), opts)
		},
	}
	cmd.Flags().StringVar(&opts.DataDir, "data-dir", controlplane.DefaultDataDir(), "directory for the store, the API token and provider state")
	cmd.Flags().StringVar(&opts.Listen, "listen", "127.0.0.1:7443", "address of the control-plane API (keep it on localhost)")
	cmd.Flags().StringVar(&opts.APISocket, "api-socket", "", "also serve the API on this unix socket (mode 0600, same token), for herd processes in other network namespaces of this machine, e.g. herd dns --server unix://PATH")
	cmd.Flags().StringVar(&opts.LBAddress, "lb-address", "127.0.0.1", "host the load balancer's fleet listeners bind on (0.0.0.0 to serve other machines; each replica on one machine needs its own, e.g. 127.0.0.2)")
	cmd.Flags().StringVar(&opts.Provider, "provider", "local", fmt.Sprintf("default provider for regions that name none (%v)", controlplane.ProviderNames()))
	cmd.Flags().StringVar(&opts.Store, "store", controlplane.StoreBolt, fmt.Sprintf("where the state is kept: %s (a file in --data-dir) or %s (an etcd cluster, with --etcd-endpoints)", controlplane.StoreBolt, controlplane.StoreEtcd))
	cmd.Flags().StringSliceVar(&opts.Etcd.Endpoints, "etcd-endpoints", nil, "client URLs of the etcd members, comma-separated (with --store etcd)")
	cmd.Flags().StringVar(&opts.Etcd.Prefix, "etcd-prefix", etcd.DefaultPrefix, "prefix of herd's keys in etcd, so that herd can share an etcd")
	cmd.Flags().StringVar(&opts.Etcd.CAFile, "etcd-ca", "", "CA certificate that verifies the etcd members (default: the system's roots for https endpoints)")
	cmd.Flags().StringVar(&opts.Etcd.CertFile, "etcd-cert", "", "client certificate for etcd (with --etcd-key)")
	cmd.Flags().StringVar(&opts.Etcd.KeyFile, "etcd-key", "", "client key for etcd (with --etcd-cert)")
	cmd.Flags().IntVar(&opts.Etcd.MaxTxnOps, "etcd-max-txn-ops", etcd.DefaultMaxTxnOps, "most records one write may change: the etcd server's --max-txn-ops (a fleet's instance changes are written together)")
	cmd.Flags().StringVar(&opts.Etcd.Username, "etcd-username", "", "etcd user (with --etcd-password-file)")
	cmd.Flags().StringVar(&etcdPasswordFile, "etcd-password-file", "", "file holding the etcd user's password (with --etcd-username)")
	cmd.Flags().DurationVar(&opts.Etcd.RequestTimeout, "etcd-request-timeout", etcd.DefaultRequestTimeout, "how long a read or write waits for etcd before the API answers 503 \"etcd has no quorum\"")
	cmd.Flags().IntVar(&opts.LeaderLeaseTTL, "leader-lease-ttl", leader.DefaultTTL, "seconds a dead leader keeps the controller before another replica takes over (with --store etcd); etcd raises it to 1.5x its election timeout, so 1 needs etcd's --election-timeout at most 500")
	cmd.Flags().StringVar(&orphans, "orphans", orphansDelete, "what to do with instances no fleet owns: "+orphansDelete+" (once --orphan-grace has passed) or "+orphansKeep+" (only report them: herd get instances --orphans)")
	cmd.Flags().DurationVar(&opts.OrphanGrace, "orphan-grace", time.Minute, "how long an instance no fleet owns is left before herd deletes it")
	cmd.Flags().StringVar(&opts.DiscoveryZone, "discovery-zone", v1alpha1.DefaultDiscoveryZone, "zone the fleets are published in to each other's instances (spec.discovery): NAME.<zone> resolves, inside every instance, to the fleet's load balancer in the caller's region")
	cmd.Flags().StringVar(&opts.DiscoveryListen, "discovery-listen", "", "UDP and TCP address herd's DNS answers the discovery zone on, which every instance's cluster DNS forwards the zone to (e.g. 0.0.0.0:5354: each local instance asks it at its bridge's address, from its own; a loopback address is refused, no instance reaches it); default: not served")
	cmd.Flags().IntVar(&opts.DiscoveryHTTPPort, "discovery-http-port", 80, "port the discovery names are called on alone (http://NAME.<zone>/, with --discovery-listen): the load balancers the names resolve to route it by the Host header to each fleet's spec.discovery.port listener; 0: the names answer on the listeners' ports only")
	cmd.Flags().StringVar(&opts.Route53.ZoneID, "route53-zone", "", "keep this Route 53 hosted zone's records in step with herd's DNS: each fleet's spec.global hostname in the zone gets its healthy regions' load balancers, marked as herd's by a TXT record _herd.HOSTNAME; records herd did not create are never changed (docs/aws.md); default: none")
	cmd.Flags().StringVar(&opts.Route53.Endpoint, "route53-endpoint", "", "Route 53 API URL, for an AWS-compatible API (default: AWS's)")
	cmd.Flags().StringSliceVar(&route53Regions, "route53-aws-region", nil, "HERD_REGION=AWS_REGION for latency records (default: the herd region's name)")
	dns.register(cmd, "dns-", "serve this zone with herd's authoritative DNS (e.g. herd.test.): each fleet's spec.global hostname answered with its healthy regions' load balancers; default: no DNS")
	return cmd
}

// etcdFlags checks the --store and --etcd-* flags together, naming the flag at fault, and reads
// the etcd password file.
func etcdFlags(cmd *cobra.Command, opts *controlplane.Options, passwordFile string) error {
	var given []string
	for _, f := range []string{"etcd-endpoints", "etcd-prefix", "etcd-max-txn-ops", "etcd-ca", "etcd-cert", "etcd-key", "etcd-username", "etcd-password-file", "etcd-request-timeout", "leader-lease-ttl"} {
		if cmd.Flags().Changed(f) {
			given = append(given, "--"+f)
		}
	}
	switch {
	case opts.Store != controlplane.StoreEtcd && len(given) > 0:
		return fmt.Errorf("%s only apply with --store %s", strings.Join(given, ", "), controlplane.StoreEtcd)
	case opts.Store != controlplane.StoreEtcd:
		return nil
	case len(opts.Etcd.Endpoints) == 0:
		return fmt.Errorf("--store %s needs --etcd-endpoints: the client URLs of the etcd members, comma-separated (e.g. http://10.0.0.1:2379,http://10.0.0.2:2379,http://10.0.0.3:2379)", controlplane.StoreEtcd)
	case opts.LeaderLeaseTTL < 1:
		return fmt.Errorf("--leader-lease-ttl %d: give whole seconds, at least 1 (etcd leases count in seconds)", opts.LeaderLeaseTTL)
	case (opts.Etcd.CertFile == "") != (opts.Etcd.KeyFile == ""):
		return errors.New("--etcd-cert and --etcd-key go together: give both or neither")
	case (opts.Etcd.Username == "") != (passwordFile == ""):
		return errors.New("--etcd-username and --etcd-password-file go together: give both or neither")
	case passwordFile == "":
		return nil
	}
	b, err := os.ReadFile(passwordFile)
	if err != nil {
		return fmt.Errorf("--etcd-password-file: %w", err)
	}
	opts.Etcd.Password = strings.TrimRight(string(b), "\r\n")
	if opts.Etcd.Password == "" {
		return fmt.Errorf("--etcd-password-file %s is empty: put the etcd user's password in it", passwordFile)
	}
	return nil
}
