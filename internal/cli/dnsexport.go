package cli

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/global/route53"
)

// newDNSExportCmd is `herd dns export FLEET`: the fleet's global routing as Route 53 records.
func newDNSExportCmd(g *globals) *cobra.Command {
	var awsRegions []string
	cmd := &cobra.Command{
		Use:   "export FLEET",
		Short: "Print a fleet's global routing as Route 53 records and health checks (JSON)",
		Long: `Print the Amazon Route 53 objects equivalent to the fleet's spec.global: the health checks to
create (one per region, on its load balancer's address and first listener), the CIDR collection
for policy geo, and the change batch of record sets (SetIdentifier, Failover, Weight, Region or
CidrRoutingConfig, HealthCheckId) for 'aws route53 change-resource-record-sets'.

Ids AWS assigns are placeholders: ${HealthCheckId:<caller reference>}, ${CidrCollectionId},
${HostedZoneId}. Latency records name AWS regions: map herd's with --aws-region.`,
		Example: `  herd dns export hello > hello-route53.json
  herd dns export hello --aws-region eu=eu-west-1,us=us-east-1
  jq .ChangeBatch hello-route53.json > batch.json   # after replacing the placeholders`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mapped, err := parseAWSRegions("--aws-region", awsRegions)
			if err != nil {
				return err
			}
			opts := route53.Options{Addresses: map[string][]netip.Addr{}, AWSRegions: mapped}
			c, err := g.client()
			if err != nil {
				return err
			}
			f, err := c.GetFleet(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			table, err := c.Routes(cmd.Context())
			if err != nil {
				return err
			}
			for _, r := range table.Routes {
				if r.Fleet == f.Metadata.Name {
					for _, rg := range r.Regions {
						opts.Addresses[rg.Name] = rg.Addresses
					}
				}
			}
			out, err := route53.FromFleet(f, opts)
			if err != nil {
				return err
			}
			enc := json.NewEncoder(g.out)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		},
	}
	cmd.Flags().StringSliceVar(&awsRegions, "aws-region", nil, "HERD_REGION=AWS_REGION for latency records (default: the herd region's name)")
	return cmd
}

// parseAWSRegions reads the HERD_REGION=AWS_REGION values of flag.
func parseAWSRegions(flag string, values []string) (map[string]string, error) {
	out := map[string]string{}
	for _, m := range values {
		herdRegion, aws, ok := strings.Cut(m, "=")
		if !ok || herdRegion == "" || aws == "" {
			return nil, fmt.Errorf("%s %q: write HERD_REGION=AWS_REGION, e.g. eu=eu-west-1", flag, m)
		}
		out[herdRegion] = aws
	}
	return out, nil
}
