// Package hostnet is what the local provider and the network lab do with the host's network: its
// named network namespaces (those `ip netns` keeps in NetnsDir: make, enter, kill what runs in,
// delete), its links, addresses, routes and TUN devices (through rtnetlink, not the ip command),
// the subnets free on it, and the host-wide names and lock they share.
package hostnet

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// NetnsDir is where `ip netns` keeps named network namespaces.
const NetnsDir = "/run/netns"

// NetnsExists reports whether the named network namespace exists.
func NetnsExists(ns string) bool {
	_, err := os.Stat(filepath.Join(NetnsDir, ns))
	return err == nil
}

// InNetns runs fn on an OS thread that has joined the network namespace at path, then takes the
// thread back to the namespace it came from. A thread that cannot be taken back is never given
// back to the Go scheduler. Taking it back matters even then: when the goroutine happens to run on
// the process's main thread, that thread is kept (parked, not ended) in the namespace it was left
// in, and /proc/<pid>/ns/net, which reads the main thread's, would then name the instance's
// namespace: a teardown that kills every process in it would kill this one.
func InNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			errc <- fmt.Errorf("this thread's network namespace: %w", err)
			return
		}
		defer home.Close()
		f, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread() // still in its own namespace
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		err = fn()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else: the thread stays locked and ends with the goroutine
		errc <- err
	}()
	return <-errc
}

// DialInNetns dials address from inside the named network namespace (one `ip netns` keeps): the
// socket stays in that namespace, whose network it reaches, wherever the connection is used.
func DialInNetns(ctx context.Context, ns, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := InNetns(filepath.Join(NetnsDir, ns), func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, address)
		conn = c
		return err
	})
	return conn, err
}
