// Package hostnet is what the local provider and the network lab do with the host's named network
// namespaces (those `ip netns` keeps in NetnsDir): find one, and run code inside one.
package hostnet

import (
	"fmt"
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

// InNetns runs fn on an OS thread that has joined the network namespace at path. The thread is
// never given back to the Go scheduler: it ends with the goroutine.
func InNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // no unlock: the thread's namespace is changed for good
		f, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
