package hostnet

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// No thread of this process is left in a namespace InNetns entered: a teardown that kills every
// process whose /proc/<pid>/ns/net names an instance's namespace must never find this one.
func TestInNetnsLeavesNoThreadBehind(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	ns := fmt.Sprintf("herdtest-hostnet-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", ns).Run() })
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
