package containerdstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"herd.dev/herd/internal/agent/distro/upstream"
)

// daemon is a containerd of the host serving one root, without the CRI plugin, for ctr.
type daemon struct {
	sock, log string
	cmd       *exec.Cmd
	exited    chan error
	stopped   bool
}

// startDaemon starts containerd on root, its config, state, socket and log in dir, and waits
// until it answers.
func startDaemon(ctx context.Context, dir, root string) (*daemon, error) {
	d := &daemon{sock: filepath.Join(dir, "c.sock"), log: filepath.Join(dir, "containerd.log"), exited: make(chan error, 1)}
	if len(d.sock) > 100 {
		return nil, fmt.Errorf("work directory %s: too long a path for containerd's socket; give a shorter one", dir)
	}
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.native"]

[grpc]
  address = %q
`, root, filepath.Join(dir, "state"), d.sock)
	conf := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(conf, []byte(config), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(d.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	d.cmd = exec.Command("containerd", "--config", conf)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	// containerd goes when the process that started it dies, killed in the middle of an import,
	// rather than serving a half-made store no one will finish.
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("containerd (hack/install-deps.sh installs it): %w", err)
	}
	go func() { d.exited <- d.cmd.Wait() }()
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-d.exited:
			d.stopped = true
			return false, fmt.Errorf("containerd exited: %v", err)
		default:
		}
		c, err := net.Dial("unix", d.sock)
		if err != nil {
			return false, nil
		}
		c.Close()
		return true, nil
	})
	if err != nil {
		err = d.fail(fmt.Errorf("containerd for the images: %w", err))
		d.stop()
		return nil, err
	}
	return d, nil
}

// ctr runs ctr against the daemon, in the CRI plugin's namespace.
func (d *daemon) ctr(ctx context.Context, args ...string) error {
	return run(ctx, "ctr", append([]string{"--address", d.sock, "--namespace", upstream.ContainerdNamespace}, args...)...)
}

// collect removes what nothing references (the index each import writes, a scratch snapshot)
// now, and not whenever containerd's collector would have come to it: deleting a lease with
// --sync runs the garbage collector and waits for it.
func (d *daemon) collect(ctx context.Context) error {
	if err := errors.Join(d.ctr(ctx, "leases", "create", "--id", "herd-store-gc"), d.ctr(ctx, "leases", "delete", "--sync", "herd-store-gc")); err != nil {
		return d.fail(fmt.Errorf("collecting containerd's garbage: %w", err))
	}
	return nil
}

// fail adds the end of containerd's log to err.
func (d *daemon) fail(err error) error {
	return fmt.Errorf("%w\ncontainerd's log:\n%s", err, tailFile(d.log, 3000))
}

// stop stops containerd with SIGTERM (SIGKILL after 30 s) and waits for it; an exit status of
// its own is no failure.
func (d *daemon) stop() error {
	if d.stopped {
		return nil
	}
	d.stopped = true
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return d.fail(errors.New("containerd did not stop within 30 s of SIGTERM"))
	}
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || !ee.Exited()) {
		return d.fail(err)
	}
	return nil
}
