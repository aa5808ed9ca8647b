package upstream

import (
	"fmt"
	"net/netip"

	"github.com/coreos/go-iptables/iptables"
)

// masqueradeComment marks herd's rule among the node's NAT rules.
const masqueradeComment = "herd: pod traffic leaving the node"

// masqueradePods makes the pods' traffic that leaves the node (for another fleet's load
// balancer, a DNS server, the internet) go out with the node's address: every instance uses the
// same pod range (PodCIDR), so nothing outside routes it back. It writes one rule for the whole
// range, once, and only if it is not there already (a restarted agent finds it). The CNI bridge
// plugin's ipMasq did the same with a chain and rules of each pod's own, written by iptables
// processes the pod's sandbox waited for while the node was busiest.
func masqueradePods(pods netip.Prefix) error {
	ipt, err := iptables.NewWithProtocol(iptables.ProtocolIPv4)
	if err != nil {
		return fmt.Errorf("upstream: masquerading the pods' traffic: %w", err)
	}
	if err := ipt.AppendUnique("nat", "POSTROUTING", masqueradeRule(pods)...); err != nil {
		return fmt.Errorf("upstream: masquerading the pods' traffic: %w", err)
	}
	return nil
}

// masqueradeRule is the rule's specification: from the pod range to anywhere outside it.
func masqueradeRule(pods netip.Prefix) []string {
	return []string{"-s", pods.String(), "!", "-d", pods.String(),
		"-m", "comment", "--comment", masqueradeComment, "-j", "MASQUERADE"}
}
