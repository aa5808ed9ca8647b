package hostnet

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// testNetns makes a named network namespace for the test, deleted when it ends.
func testNetns(t *testing.T, what string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ns := fmt.Sprintf("herdtest-%s-%d", what, os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
	return ns
}

// No thread of this process is left in a namespace InNetns entered: a teardown that kills every
// process whose /proc/<pid>/ns/net names an instance's namespace must never find this one.
func TestInNetnsLeavesNoThreadBehind(t *testing.T) {
	ns := testNetns(t, "hostnet")
	home, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	inside := ""
	for range 200 {
		if err := InNetns(filepath.Join(NetnsDir, ns), func() error {
			inside, err = os.Readlink("/proc/thread-self/ns/net")
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	if inside == home {
		t.Fatalf("fn ran in %s, the process's own namespace", inside)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if l, err := os.Readlink(filepath.Join("/proc/self/task", task.Name(), "ns/net")); err == nil && l != home {
			t.Errorf("thread %s is left in %s, not %s", task.Name(), l, home)
		}
	}
}

// DialInNetns reaches a listener that only the namespace has (dialled from the host, its port on
// the host's loopback refuses), and the connection stays usable after the dial returns to the
// host's namespace.
func TestDialInNetnsReachesTheNamespace(t *testing.T) {
	ns := testNetns(t, "dial")
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("ip link set lo up: %v %s", err, out)
	}
	var l net.Listener
	if err := InNetns(filepath.Join(NetnsDir, ns), func() (err error) {
		l, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		if c, err := l.Accept(); err == nil {
			c.Write([]byte("inside"))
			c.Close()
		}
	}()
	c, err := DialInNetns(context.Background(), ns, "tcp", l.Addr().String())
	if err != nil {
		t.Fatalf("DialInNetns: %v", err)
	}
	defer c.Close()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "inside" {
		t.Fatalf("read %q, %v; want the namespace's listener's %q", got, err, "inside")
	}
}
