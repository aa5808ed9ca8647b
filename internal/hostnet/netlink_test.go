package hostnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ipShow runs `ip -n ns ARGS` (the host's when ns is ""): iproute2 is the independent reader of
// what the netlink calls made.
func ipShow(t *testing.T, ns string, args ...string) string {
	t.Helper()
	if ns != "" {
		args = append([]string{"-n", ns}, args...)
	}
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func mustContain(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s: %q not in:\n%s", what, w, got)
		}
	}
}

// The network made through netlink is the one ip would make: a namespace on a bridge through a
// veth pair, addressed and routed, that a connection crosses; a persistent TUN device with a
// point-to-point address and link-scope routes. Every step runs twice, as a restart after a
// crash repeats it, and the teardown leaves nothing.
func TestNetlinkBuildsWhatIPShows(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Fatalf("needs /dev/net/tun: %v", err)
	}
	ctx := context.Background()
	id := ShortHash(fmt.Sprint(os.Getpid(), time.Now().UnixNano()), 6)
	nsA, nsB := "herdtest-nl-a-"+id, "herdtest-nl-b-"+id
	bridge, hostVeth := "htbr"+id, "htv"+id
	gateway := netip.MustParsePrefix("198.18.77.1/24")
	inside := netip.MustParsePrefix("198.18.77.2/24")
	t.Cleanup(func() {
		_ = DeleteNetns(ctx, nsA, hostVeth)
		_ = DeleteNetns(ctx, nsB, "")
		_ = DeleteLink(ctx, bridge)
	})

	for range 2 {
		for _, ns := range []string{nsA, nsB} {
			if err := EnsureNetns(ctx, ns, false); err != nil {
				t.Fatal(err)
			}
		}
		if err := EnsureBridge(bridge, gateway); err != nil {
			t.Fatal(err)
		}
		if err := AddVeth(hostVeth, bridge, "eth0", nsA); err != nil {
			t.Fatal(err)
		}
		if err := Address(nsA, "eth0", inside); err != nil {
			t.Fatal(err)
		}
		if err := RouteVia(nsA, gateway.Addr()); err != nil {
			t.Fatal(err)
		}
		if err := EnsureTun(nsB, "tun0"); err != nil {
			t.Fatal(err)
		}
		if err := PointToPoint(nsB, "tun0", netip.MustParseAddr("198.18.78.1"), netip.MustParseAddr("198.18.78.2")); err != nil {
			t.Fatal(err)
		}
		if err := RouteDev(nsB, netip.Prefix{}, "tun0"); err != nil {
			t.Fatal(err)
		}
		if err := RouteDev(nsB, netip.MustParsePrefix("198.18.79.0/24"), "tun0"); err != nil {
			t.Fatal(err)
		}
	}
	list := ipShow(t, "", "netns", "list")
	mustContain(t, "ip netns list", list, nsA, nsB)
	mustContain(t, "bridge", ipShow(t, "", "-d", "addr", "show", "dev", bridge), "bridge", "inet 198.18.77.1/24", ",UP")
	mustContain(t, "host veth", ipShow(t, "", "link", "show", "dev", hostVeth), "master "+bridge, ",UP")
	mustContain(t, "eth0", ipShow(t, nsA, "addr", "show", "dev", "eth0"), "inet 198.18.77.2/24", ",UP")
	mustContain(t, "lo", ipShow(t, nsA, "link", "show", "dev", "lo"), ",UP")
	mustContain(t, "default route", ipShow(t, nsA, "route", "show", "default"), "default via 198.18.77.1 dev eth0")
	mustContain(t, "tun0", ipShow(t, nsB, "-d", "addr", "show", "dev", "tun0"), "tun type tun pi off", "persist on", "inet 198.18.78.1 peer 198.18.78.2/32")
	mustContain(t, "tun0 routes", ipShow(t, nsB, "route", "show"), "default dev tun0 scope link", "198.18.79.0/24 dev tun0 scope link")
	if !HasLink(nsB, "tun0") || HasLink(nsB, "eth0") {
		t.Errorf("HasLink: tun0 %v (want true), eth0 %v (want false)", HasLink(nsB, "tun0"), HasLink(nsB, "eth0"))
	}

	// A connection from inside the namespace reaches the host through the bridge.
	ln, err := net.Listen("tcp", gateway.Addr().String()+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Write([]byte("across"))
			c.Close()
		}
	}()
	var got []byte
	if err := InNetns(filepath.Join(NetnsDir, nsA), func() error {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), 10*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		got = make([]byte, 6)
		_, err = c.Read(got)
		return err
	}); err != nil || string(got) != "across" {
		t.Fatalf("from netns %s to %s: %q, %v", nsA, ln.Addr(), got, err)
	}

	// Errors name the device and the namespace, with the kernel's reason.
	err = Address(nsA, "nope0", inside)
	if err == nil || !strings.Contains(err.Error(), "nope0 in netns "+nsA) || !strings.Contains(err.Error(), "not found") {
		t.Errorf("addressing a missing device: %v", err)
	}

	for range 2 {
		if err := RemoveAddress(nsA, "eth0", inside); err != nil {
			t.Fatal(err)
		}
	}
	if err := FlushAddresses(nsB, "tun0"); err != nil {
		t.Fatal(err)
	}
	if out := ipShow(t, nsB, "addr", "show", "dev", "tun0") + ipShow(t, nsA, "addr", "show", "dev", "eth0"); strings.Contains(out, "inet ") {
		t.Errorf("addresses left after removal and flush:\n%s", out)
	}
	for range 2 {
		if err := RemoveLink(nsB, "tun0"); err != nil {
			t.Fatal(err)
		}
	}
	if HasLink(nsB, "tun0") {
		t.Error("tun0 is still there after RemoveLink")
	}

	if err := DeleteNetns(ctx, nsA, hostVeth); err != nil {
		t.Fatal(err)
	}
	if err := DeleteNetns(ctx, nsB, ""); err != nil {
		t.Fatal(err)
	}
	if err := DeleteLink(ctx, bridge); err != nil {
		t.Fatal(err)
	}
	if list := ipShow(t, "", "netns", "list"); strings.Contains(list, nsA) || strings.Contains(list, nsB) {
		t.Errorf("namespaces left:\n%s", list)
	}
	if LinkExists(hostVeth) || LinkExists(bridge) {
		t.Errorf("links left: veth %v, bridge %v", LinkExists(hostVeth), LinkExists(bridge))
	}
	home, _ := os.Readlink("/proc/self/ns/net")
	tasks, _ := os.ReadDir("/proc/self/task")
	for _, task := range tasks {
		if l, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net")); err == nil && l != home {
			t.Errorf("thread %s is left in %s, not %s", task.Name(), l, home)
		}
	}
}
