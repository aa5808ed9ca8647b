package upstream

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"herd.dev/herd/internal/hostnet"
)

// The pods' traffic to outside their range is masqueraded by one rule, written once however
// often the agent starts; traffic between pods is not.
func TestMasqueradePodsWritesOneRuleOnce(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("iptables is not on PATH: run make deps (hack/install-deps.sh): %v", err)
	}
	ns := testNetns(t, "masq")
	var rules string
	if err := hostnet.InNetns(filepath.Join(hostnet.NetnsDir, ns), func() error {
		for range 2 { // the agent's start, then its restart
			if err := masqueradePods(PodCIDR); err != nil {
				return err
			}
		}
		out, err := exec.Command("iptables", "-t", "nat", "-S", "POSTROUTING").CombinedOutput()
		rules = string(out)
		return err
	}); err != nil {
		t.Fatalf("%v: %s", err, rules)
	}
	want := `-A POSTROUTING -s 10.214.0.0/24 ! -d 10.214.0.0/24 -m comment --comment "herd: pod traffic leaving the node" -j MASQUERADE`
	if n := strings.Count(rules, want); n != 1 {
		t.Errorf("POSTROUTING has %d copies of\n%s\nwant 1; it is:\n%s", n, want, rules)
	}
}
