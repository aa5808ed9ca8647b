package cli

import (
	"context"
	"fmt"
	"io"
	"strings"

	"herd.dev/herd/api/v1alpha1"
	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/global/routes"
)

// getRoutes is `herd get routes [HOSTNAME] [-o wide|yaml|json]`: each global hostname and each
// discovery name (policy nearest: the caller's own region first), its policy, and per region how
// it takes part in the DNS answers and why. HOSTNAME may also be a fleet's name.
func getRoutes(ctx context.Context, g *globals, args []string, output string) error {
	format, c, err := formatAndClient(g, output)
	if err != nil {
		return err
	}
	hostname := ""
	if len(args) == 1 {
		hostname = args[0]
	}
	table, err := c.Routes(ctx)
	if err != nil {
		return err
	}
	if hostname != "" {
		want := strings.ToLower(strings.TrimSuffix(hostname, "."))
		rs := table.Routes[:0]
		for _, r := range table.Routes {
			if r.Hostname == want || r.Fleet == hostname {
				rs = append(rs, r)
			}
		}
		ds := table.Discovery[:0]
		for _, r := range table.Discovery {
			if r.DiscoveryHostname(table.DiscoveryZone) == want || r.Fleet == hostname {
				ds = append(ds, r)
			}
		}
		if len(rs)+len(ds) == 0 {
			return fmt.Errorf("no route for %q: give a fleet's spec.global.hostname, its discovery name or the fleet's name (herd get routes lists them)", hostname)
		}
		table.Routes, table.Discovery = rs, ds
	}
	if format == "yaml" || format == "json" {
		return printObject(g.out, format, table)
	}
	if len(table.Routes)+len(table.Discovery) == 0 {
		fmt.Fprintln(g.errOut, "No routes found: give a fleet spec.global (docs/global-routing.md), or a listener to publish it (spec.discovery).")
		return nil
	}
	headers := []string{"HOSTNAME", "FLEET", "POLICY", "TTL", "REGION", "ANSWER", "READY", "ADDRESS", "WHY"}
	t := newTable(g.out, headers...)
	row := func(hostname, policy string, r routes.Route, answer []string) {
		for i, rg := range r.Regions {
			var addrs []string
			for _, a := range rg.Addresses {
				addrs = append(addrs, a.String())
			}
			if len(addrs) == 0 {
				addrs = []string{"<none>"}
			}
			t.row(hostname, r.Fleet, policy, fmt.Sprintf("%ds", r.TTLSeconds), rg.Name, answer[i],
				fmt.Sprintf("%d/%d", rg.Ready, rg.MinReady), strings.Join(addrs, ","), rg.Why)
		}
	}
	for _, r := range table.Routes {
		row(r.Hostname, string(r.Policy), r, r.Answer())
	}
	for _, r := range table.Discovery {
		policy := "nearest"
		if table.DiscoveryHTTPPort != 0 && r.Port != 0 {
			// The name alone is called on the standard port and reaches this listener.
			policy += fmt.Sprintf(", port %d to %d", table.DiscoveryHTTPPort, r.Port)
		}
		if len(r.AllowFrom) > 0 {
			policy += " (from " + strings.Join(r.AllowFrom, ",") + ")"
		}
		row(r.DiscoveryHostname(table.DiscoveryZone), policy, r, r.DiscoveryAnswer())
	}
	return t.flush()
}

// describeGlobal prints, for a fleet with spec.global, each region as herd's DNS sees it: its part
// in the answers and why. A control plane that computes no routes is said so, not an error.
func describeGlobal(ctx context.Context, w io.Writer, c *client.Client, f *v1alpha1.Fleet) {
	g := f.Spec.Global
	if g == nil {
		return
	}
	ttl := v1alpha1.DefaultGlobalTTL
	if g.TTL != nil {
		ttl = g.TTL.Duration
	}
	fmt.Fprintf(w, "%-20s%s, policy %s, TTL %s, min %d Ready per region\n", "Global:", g.Hostname, g.Policy, ttl, deref(g.MinHealthyInstances))
	table, err := c.Routes(ctx)
	if err != nil {
		fmt.Fprintf(w, "  routes unavailable: %v\n", err)
		return
	}
	for _, r := range table.Routes {
		if r.Fleet != f.Metadata.Name {
			continue
		}
		t := newTable(newIndent(w), "REGION", "DNS ANSWER", "READY", "REACHABLE", "WHY")
		answer := r.Answer()
		for i, rg := range r.Regions {
			t.row(rg.Name, answer[i], fmt.Sprintf("%d/%d", rg.Ready, rg.MinReady), rg.Reachable, rg.Why)
		}
		_ = t.flush()
	}
}
