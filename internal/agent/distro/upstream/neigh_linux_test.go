package upstream

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/hostnet"
)

// A pod that gets the address of a pod that is gone, and only listens, is reachable from the
// node at once: the gone pod's neighbour entry does not send the node's packets to its MAC
// address. Without forgetGonePods the dial below waits for the kernel's probes (5 s and more).
func TestNewPodAtAGonePodsAddressIsReachable(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	node := testNetns(t, "node")
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	// The bridge's own address is set, as one with pods keeps it: a bridge whose address
	// changes (it takes its lowest port's) has the kernel flush its neighbours by itself.
	ip("-n", node, "link", "add", "cni0", "address", "02:00:00:00:00:01", "type", "bridge")
	ip("-n", node, "addr", "add", "10.99.0.1/24", "dev", "cni0")
	ip("-n", node, "link", "set", "cni0", "up")
	const podAddr = "10.99.0.5"
	addPod := func(name, mac string) net.Listener {
		pod := testNetns(t, name)
		ip("-n", node, "link", "add", "v"+name, "type", "veth", "peer", "name", "eth0", "netns", pod)
		ip("-n", node, "link", "set", "v"+name, "master", "cni0", "up")
		ip("-n", pod, "link", "set", "eth0", "address", mac, "up")
		ip("-n", pod, "addr", "add", podAddr+"/24", "dev", "eth0")
		var l net.Listener
		if err := hostnet.InNetns(filepath.Join(hostnet.NetnsDir, pod), func() (err error) {
			l, err = net.Listen("tcp", podAddr+":8080")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
		t.Cleanup(func() { l.Close() })
		return l
	}
	dial := func(timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		c, err := hostnet.DialInNetns(ctx, node, "tcp", podAddr+":8080")
		if err == nil {
			c.Close()
		}
		return err
	}
	neighbour := func() string {
		out, err := exec.Command("ip", "-n", node, "neigh", "show", podAddr, "dev", "cni0").CombinedOutput()
		if err != nil {
			t.Fatalf("ip neigh show: %v %s", err, out)
		}
		return string(out)
	}

	addPod("keep", "02:00:00:00:00:0a") // keeps the bridge's carrier up when the old pod goes
	ns, err := netns.GetFromPath(filepath.Join(hostnet.NetnsDir, node))
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := forgetGonePods(ctx, ns, "cni0", slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}

	old := addPod("old", "02:00:00:00:00:0b")
	if err := dial(5 * time.Second); err != nil {
		t.Fatalf("the first pod: %v", err)
	}
	if n := neighbour(); !strings.Contains(n, "02:00:00:00:00:0b") {
		t.Fatalf("the node has no neighbour entry for the first pod: %q", n)
	}
	old.Close()
	ip("-n", node, "link", "del", "vold")
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		return !strings.Contains(neighbour(), "02:00:00:00:00:0b"), nil
	})
	if err != nil {
		t.Fatalf("the gone pod's neighbour entry is kept: %q", neighbour())
	}

	addPod("new", "02:00:00:00:00:0c")
	if err := dial(2 * time.Second); err != nil {
		t.Fatalf("the pod at the gone pod's address: %v (neighbour %q)", err, neighbour())
	}
}

// testNetns makes a named network namespace for the test, deleted when it ends.
func testNetns(t *testing.T, what string) string {
	t.Helper()
	ns := fmt.Sprintf("herdtest-upstream-%s-%d", what, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
	return ns
}
