package cli

import (
	"bytes"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime"
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

func TestStartBusyPoll(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	run := func(procs int, flag string) (func(), error, string) {
		t.Helper()
		runtime.GOMAXPROCS(procs)
		cmd := newLBCmd(&globals{})
		if flag != "" {
			if err := cmd.Flags().Set("busy-poll", flag); err != nil {
				t.Fatal(err)
			}
		}
		var logs bytes.Buffer
		stop, err := startBusyPoll(cmd, slog.New(slog.NewTextHandler(&logs, nil)), "herd lb")
		return stop, err, logs.String()
	}

	stop, err, logs := run(1, "")
	if err != nil || stop == nil || logs != "" {
		t.Fatalf("default on one thread: stop %v, err %v, logs %q; want a running poller", stop != nil, err, logs)
	}
	if stop2, err, _ := run(1, ""); stop2 != nil || err != nil {
		t.Errorf("a second poller in one process: stop %v, err %v; want it refused (logged), nothing else", stop2 != nil, err)
	}
	stop()

	if stop, err, logs := run(2, ""); stop != nil || err != nil || logs != "" {
		t.Errorf("default with GOMAXPROCS=2: stop %v, err %v, logs %q; want off quietly", stop != nil, err, logs)
	}
	if stop, err, logs := run(2, "50us"); stop != nil || err != nil || !strings.Contains(logs, "GOMAXPROCS=1") {
		t.Errorf("--busy-poll given with GOMAXPROCS=2: stop %v, err %v, logs %q; want off with a warning naming GOMAXPROCS", stop != nil, err, logs)
	}
	if stop, err, _ := run(1, "0"); stop != nil || err != nil {
		t.Errorf("--busy-poll 0: stop %v, err %v; want off", stop != nil, err)
	}
	if _, err, _ := run(1, "-1ms"); err == nil || !strings.Contains(err.Error(), "--busy-poll") {
		t.Errorf("--busy-poll -1ms: err %v, want one naming the flag", err)
	}
}
