package controlplane_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"herd.dev/herd/internal/client"
	"herd.dev/herd/internal/controlplane"
)

// TestAPISocket: herd up --api-socket serves the API on a unix socket of mode 0600, with the same
// token, replaces a socket an earlier run left, and removes it when it stops; a file that is not
// a socket is left alone and refused.
func TestAPISocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "api.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // a socket file nobody listens on, as a killed herd up leaves it
	// Runs after the control plane's own cleanup has stopped it.
	t.Cleanup(func() {
		if _, err := os.Lstat(sock); !os.IsNotExist(err) {
			t.Errorf("the api socket outlived herd up: %v", err)
		}
	})
	c, cl := inProcessWith(t, func(o *controlplane.Options) { o.APISocket = sock })
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("api socket %v %v, want a socket of mode 0600", fi.Mode(), err)
	}
	cfg, err := client.LoadConfig(filepath.Join(c.dir, "config"))
	if err != nil {
		t.Fatal(err)
	}
	over := cl.WithServer("unix://" + sock)
	if _, err := over.ListFleets(context.Background()); err != nil {
		t.Fatalf("the API over its socket: %v", err)
	}
	cfg.Token = "wrong"
	if _, err := client.New(cfg).WithServer("unix://" + sock).ListFleets(context.Background()); err == nil {
		t.Fatal("the socket answered a wrong token")
	}

	notSocket := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notSocket, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	err = controlplane.Run(context.Background(), controlplane.Options{DataDir: filepath.Join(dir, "data"), Listen: "127.0.0.1:0",
		Provider: "fake", ConfigPath: filepath.Join(dir, "config"), APISocket: notSocket})
	if err == nil {
		t.Fatal("herd up started with --api-socket on a regular file")
	}
	if data, _ := os.ReadFile(notSocket); string(data) != "keep" {
		t.Fatalf("the file at --api-socket was changed: %q (%v)", data, err)
	}
	t.Logf("refused: %v", err)
}
