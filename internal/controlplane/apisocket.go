// The API's optional unix socket: the way in for herd processes in other network namespaces of
// this machine, which cannot reach the host's loopback.

package controlplane

import (
	"fmt"
	"net"
	"os"
)

// listenAPISocket opens the API's unix socket at path, mode 0600 (root's only, like the token
// file; the API still asks for the token), replacing a socket an earlier herd up left behind.
// Anything else at path is left alone.
func listenAPISocket(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("--api-socket %s: exists and is not a socket; choose another path", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("--api-socket %s: removing the old socket: %w", path, err)
		}
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("--api-socket %s: %w", path, err)
	}
	// Connecting needs write permission, which the usual umask already denies to others.
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return nil, fmt.Errorf("--api-socket %s: %w", path, err)
	}
	return l, nil
}
