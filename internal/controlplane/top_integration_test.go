package controlplane_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"herd.dev/herd/internal/apiserver"
	"herd.dev/herd/internal/cli"
)

// herdTop runs `herd top args...` in this process against the cluster's API.
func herdTop(c *cluster, args ...string) (string, error) {
	var out, errOut strings.Builder
	cmd := cli.NewRootCmd(&out, &errOut)
	cmd.SetArgs(append([]string{"--config", filepath.Join(c.dir, "config"), "top"}, args...))
	err := cmd.ExecuteContext(c.t.Context())
	return out.String() + errOut.String(), err
}

// TestIntegrationTopUnderLoad sends load through herd's load balancer to a fleet of three
// instances (in-process control plane, fake provider, loopback backends, fake agents when their
// port is free) and waits until `herd top instances` shows each instance serving requests, with
// its CPU and memory, and `herd top fleets` the fleet's sum.
func TestIntegrationTopUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test")
	}
	const n = 3
	c, agents := loadedFleet(t, n)

	var insts []apiserver.InstanceUsage
	c.waitFor(60*time.Second, func() string {
		out, err := herdTop(c, "instances", "--fleet", "web", "-o", "json")
		if err != nil {
			return fmt.Sprintf("herd top: %v %s", err, out)
		}
		insts = nil
		if err := json.Unmarshal([]byte(out), &insts); err != nil {
			return fmt.Sprintf("herd top -o json: %v: %s", err, out)
		}
		if len(insts) != n {
			return fmt.Sprintf("%d instances, want %d: %s", len(insts), n, out)
		}
		for _, in := range insts {
			if in.RequestsPerSecond == nil || *in.RequestsPerSecond <= 0 || in.LatencyP95Seconds == nil || in.Errors5xxPerSecond == nil {
				return fmt.Sprintf("instance %s has no request figures yet: %s", in.Instance, out)
			}
			if agents && (in.CPUCores == nil || *in.CPUCores <= 0 || in.MemoryBytes == nil || *in.MemoryBytes != 300<<20) {
				return fmt.Sprintf("instance %s has no node figures yet: %s", in.Instance, out)
			}
		}
		return ""
	})
	table, err := herdTop(c, "instances")
	if err != nil {
		t.Fatal(err)
	}
	fleets, err := herdTop(c, "fleets")
	if err != nil || !strings.Contains(fleets, "web    3 ") {
		t.Fatalf("herd top fleets: %v\n%s", err, fleets)
	}
	t.Logf("herd top instances:\n%s\nherd top fleets:\n%s", table, fleets)
}
