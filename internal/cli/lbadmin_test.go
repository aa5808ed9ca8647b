package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestListenAdminUnixSocket(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "admin.sock")
	ln, err := listenAdmin("unix:" + path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %s: %v, mode %v; want 0600", path, err, fi.Mode().Perm())
	}
	if _, err := listenAdmin("unix:" + path); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("a second listener on a socket in use: %v, want an error saying so", err)
	}
	// A socket left by a load balancer that stopped is replaced.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	ln, err = listenAdmin("unix:" + path)
	if err != nil {
		t.Fatalf("a stale socket was not replaced: %v", err)
	}
	ln.Close()
	file := filepath.Join(dir, "config.yaml")
	os.WriteFile(file, []byte("x"), 0o600)
	if _, err := listenAdmin("unix:" + file); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Errorf("a regular file as the socket: %v, want an error saying so", err)
	}
	if _, err := listenAdmin("unix:"); err == nil {
		t.Errorf("unix: without a path: no error")
	}
}
