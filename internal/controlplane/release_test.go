package controlplane_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"herd.dev/herd/internal/controlplane"
	globaldns "herd.dev/herd/internal/global/dns"
	"herd.dev/herd/internal/provider/fake"
)

// TestRunReleasesSocketsOnFailure: herd up that fails after it opened its sockets (here, writing
// the client config under a regular file) closes every one of them, so that the next herd up on
// the same addresses starts: the API's, the unix socket's and the DNS server's.
func TestRunReleasesSocketsOnFailure(t *testing.T) {
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	apiAddr, dnsAddr := freeAddr(t), freeAddr(t)
	sock := filepath.Join(dir, "api.sock")
	err := controlplane.Run(context.Background(), controlplane.Options{
		DataDir: filepath.Join(dir, "data"), Listen: apiAddr, APISocket: sock, Provider: fake.Name,
		ConfigPath: filepath.Join(notDir, "config"),
		DNS:        controlplane.DNSOptions{Zone: "herd.test.", Listen: dnsAddr},
	})
	if err == nil {
		t.Fatal("herd up started with its client config under a regular file")
	}
	t.Logf("refused: %v", err)
	ln, err := net.Listen("tcp", apiAddr)
	if err != nil {
		t.Errorf("the API's address is still taken: %v", err)
	} else {
		ln.Close()
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the API socket outlived herd up: %v", err)
	}
	l, err := globaldns.Listen(dnsAddr)
	if err != nil {
		t.Errorf("the DNS server's address is still taken: %v", err)
	} else {
		l.Close()
	}
}

// freeAddr returns a loopback address whose TCP and UDP ports were both free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := globaldns.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}
