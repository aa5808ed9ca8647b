package upstream

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// procSys is where the kernel's settings are; those under net/ are the network namespace's of the
// process that opens them, so the agent's writes there are the instance's own.
const procSys = "/proc/sys"

// icmpRateMask is the setting that selects which ICMP messages the kernel rate-limits per peer
// (one a second after a burst of six, net.ipv4.icmp_ratelimit).
const icmpRateMask = "net/ipv4/icmp_ratemask"

// destUnreachable is ICMP type 3, destination unreachable, as a bit of icmpRateMask.
const destUnreachable = 1 << 3

// unlimitRejects takes destination unreachable out of the kernel's per-peer ICMP rate limit
// (root is /proc/sys, or a directory of its own in tests). kube-proxy answers a connection to a
// Service that has no ready endpoint yet (the workload's NodePort while its pod starts) with
// ICMP port unreachable, so that the client learns at once that nothing serves there yet. A
// client that tries again every few milliseconds, as a load balancer's health check or anyone
// waiting for a new instance does, got that answer six times; after that the kernel dropped the
// answers and each try waited for its SYN's retransmission a second later, so the first answer
// of the app came up to a second after it could. The host-wide bound on ICMP messages a second
// (net.ipv4.icmp_msgs_per_sec) still applies.
func unlimitRejects(root string) error {
	p := filepath.Join(root, icmpRateMask)
	b, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("reading %s: %w", p, err)
	}
	mask, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("%s: %q is not a number: %w", p, strings.TrimSpace(string(b)), err)
	}
	if mask&destUnreachable == 0 {
		return nil
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(mask&^destUnreachable)+"\n"), 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}
