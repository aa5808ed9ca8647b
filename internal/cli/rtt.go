package cli

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/lb"
)

// getRTT prints the round trip from each client network to each region (herd get rtt), or, with
// NAME (a client network such as 10.216.1.0/24), that network's only.
func getRTT(ctx context.Context, g *globals, args []string, output string) error {
	format := outputFormat(output)
	if err := format.check(); err != nil {
		return err
	}
	if len(args) == 1 {
		if _, err := netip.ParsePrefix(args[0]); err != nil {
			return fmt.Errorf("client network %q: give a CIDR prefix such as 10.216.1.0/24 (see herd get rtt)", args[0])
		}
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	rtts, err := c.ClientRTTs(ctx)
	if err != nil {
		return err
	}
	if len(args) == 1 {
		var only []apiserver.ClientRTT
		for _, r := range rtts {
			if r.Network == args[0] {
				only = append(only, r)
			}
		}
		rtts = only
	}
	if format == "yaml" || format == "json" {
		if rtts == nil {
			rtts = []apiserver.ClientRTT{}
		}
		return printObject(g.out, format, rtts)
	}
	return printRTT(g, rtts)
}

func printRTT(g *globals, rtts []apiserver.ClientRTT) error {
	if len(rtts) == 0 {
		fmt.Fprintln(g.errOut, "No round trips measured yet: the regional load balancers have served no client.")
		return nil
	}
	t := newTable(g.out, "NETWORK", "REGION", "RTT", "SAMPLES", "LAST-SEEN")
	for _, r := range rtts {
		t.row(r.Network, r.Region, strconv.FormatFloat(r.SRTTms, 'f', 1, 64)+"ms", r.Samples, age(&r.LastSeen)+" ago")
	}
	return t.flush()
}

// describeFront writes where the front door serves the fleet's listeners, if it does.
func describeFront(w io.Writer, fleet string, fd *apiserver.FrontDoor) {
	var lines []string
	for _, l := range fd.Listeners {
		if l.Fleet != fleet {
			continue
		}
		addr := net.JoinHostPort(fd.Address, strconv.Itoa(l.Port))
		lines = append(lines, fmt.Sprintf("%s: %s -> regions %s", l.Name, addr, strings.Join(l.Regions, ", ")))
		// Each region as the front door's own checks see it.
		for _, r := range fd.Regions {
			if r.Listener != l.Name {
				continue
			}
			s := "  region " + r.Region + ": " + r.State
			if r.RTTms > 0 {
				s += fmt.Sprintf(", round trip %.1fms", r.RTTms)
			}
			if r.LastError != "" && r.State != string(lb.StateHealthy) {
				s += " (" + r.LastError + ")"
			}
			lines = append(lines, s)
		}
	}
	if len(lines) == 0 {
		return
	}
	state := "Synced"
	if !fd.Synced {
		state = "Error: " + fd.Error
	}
	fmt.Fprintf(w, "%-20s%s\n", "Front door:", state)
	for _, l := range lines {
		fmt.Fprintf(w, "  %s\n", l)
	}
}
