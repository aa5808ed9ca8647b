package upstream

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// privateDirs are host directories that containerd, CNI and the kubelet write to whatever their
// configuration says: /run/containerd (the shims' sockets, runc's state), /var/lib/cni (CNI's
// result cache) and /var/log/containers (the kubelet's log symlinks).
var privateDirs = []string{"/run/containerd", "/var/lib/cni", "/var/log/containers"}

// privateRuntimeDirs arranges the agent's own mount namespace so that nothing of the instance
// lands in the host's directories, and the unix sockets of containerd and the kubelet have short
// paths whatever the state dir's length (a unix socket address holds 107 bytes):
//   - a tmpfs on each of privateDirs: what an instance writes there never reaches the host nor
//     another instance, and vanishes with the instance, even after a kill -9;
//   - the state dir's containerd directory bind-mounted on containerdAlias (the socket's home);
//   - the state dir's kubelet directory bind-mounted on kubeletRootDir, the kubelet's default root,
//     which it also hard-codes for its device plugin socket.
func privateRuntimeDirs(l layout) error {
	for _, dir := range privateDirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=64m"); err != nil {
			return fmt.Errorf("upstream: mounting a private tmpfs on %s: %w", dir, err)
		}
	}
	binds := []struct{ src, dst string }{
		{l.path("containerd"), containerdAlias},
		{l.path("kubelet"), kubeletRootDir},
	}
	for _, b := range binds {
		if err := os.MkdirAll(b.dst, 0o700); err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
		if err := unix.Mount(b.src, b.dst, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("upstream: bind-mounting %s on %s: %w", b.src, b.dst, err)
		}
	}
	return nil
}
