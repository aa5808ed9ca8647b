package cli

import (
	"github.com/spf13/cobra"
)

// newFrontCmd is `herd front`: the global front door, herd's load balancer in front of the regional
// ones (internal/global/front).
func newFrontCmd(g *globals) *cobra.Command {
	var configFile, adminAddr, tokenFile string
	cmd := &cobra.Command{
		Use:   "front",
		Short: "Run the global front door: one address, each request to the nearest healthy region",
		Long: `Run herd's global front door until Ctrl-C or SIGTERM. It is herd's load balancer (herd lb, same
flags, same admin API) serving listeners whose target groups are regions, one target each: the
address of that region's load balancer. With "groupPolicy: nearest" every request goes to the
region with the lowest round-trip time, as the kernel measures the front's health-check connections
to each region, among the healthy ones; an idempotent request whose region fails before any
response byte is retried once on the next nearest region; a TCP connection goes to the nearest
healthy region when it opens. "healthCheck.closeOnUnhealthy: true" breaks off the requests waiting
on a region that stopped answering, so that they are retried at once.

The control plane configures it over the admin API (PUT /config with the listeners that
front.Config builds); -f FILE gives it a config to start with. GET /health shows each region's
state and measured round trip ("rtt").`,
		Example: `  # front.yaml
  listeners:
  - name: web/http
    fleet: web
    address: ":80"
    groupPolicy: nearest
    healthCheck: {path: /healthz, interval: 500ms, timeout: 500ms, closeOnUnhealthy: true}
    retry: {budget: 1}
    groups:
    - name: eu
      targets: [{id: eu, address: "10.216.0.1:8080"}]
    - name: us
      targets: [{id: us, address: "10.216.0.2:8080"}]

  herd front -f front.yaml --admin-addr unix:/run/herd/front.sock --token-file /etc/herd/front-token
  curl --unix-socket /run/herd/front.sock -H "Authorization: Bearer $(cat /etc/herd/front-token)" http://front/health`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			return runLB(cmd, log, "herd front", configFile, adminAddr, tokenFile)
		},
	}
	addLBFlags(cmd, &configFile, &adminAddr, &tokenFile)
	return cmd
}
