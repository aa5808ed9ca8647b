// The global front door: `herd front` running in the internet namespace with an address of its own
// there, where clients reach it as they reach the regions' routers. It outlives herd up like the
// regional load balancers and is configured over its admin API, on a Unix socket because the host
// has no path into the internet namespace.

package netlab

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/statefile"
)

// Files of the front door, in net/front/.
const (
	frontSubdir    = "front"
	frontFile      = "front.json"
	frontTokenFile = "front-token"
	frontLogFile   = "front.log"
	frontSocket    = "admin.sock"
	// frontHostKey is the front door's key among the internet's addresses.
	frontHostKey = "front"
	// frontAdminHost is the host name of the front door's admin URL; the socket is what connects.
	frontAdminHost = "front"
)

// frontRecord is net/front/front.json.
type frontRecord struct {
	Address string `json:"address"`
	PID     int    `json:"pid,omitempty"`
	Start   uint64 `json:"start,omitempty"`
}

// Front tells how to reach the front door.
type Front struct {
	// DataAddress is the front door's address on the internet: listeners bound to ":<port>" (or to
	// this address) serve clients there.
	DataAddress netip.Addr
	// AdminSocket is the Unix socket of the admin API (lb.NewAdminHandler); AdminURL is its base URL,
	// to use with AdminClient, which dials the socket whatever the URL's host.
	AdminSocket string
	AdminURL    string
	// TokenFile holds the admin API's bearer token (mode 0600). It is a secret: never log it.
	TokenFile string
	// PID is the front door's process.
	PID int
}

// AdminClient returns an HTTP client whose every connection goes to the admin API's socket.
func (f Front) AdminClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", f.AdminSocket)
		},
	}}
}

func (l *Lab) frontDir() string { return filepath.Join(l.opts.Dir, frontSubdir) }

// EnsureFront starts the front door in the internet namespace (making that namespace if needed), or
// adopts the one that runs, and says how to reach it. A new one serves no listener until it is
// configured over its admin API; a running one keeps its configuration.
func (l *Lab) EnsureFront(ctx context.Context) (Front, error) {
	var out Front
	err := l.opts.Instances.Lock(func() error {
		inet, err := l.ensureInternet(ctx)
		if err != nil {
			return err
		}
		addr, err := l.internetHost(inet, frontHostKey)
		if err != nil {
			return err
		}
		dir := l.frontDir()
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		rec, err := statefile.Load[frontRecord](filepath.Join(dir, frontFile))
		if err != nil {
			return err
		}
		if rec == nil {
			rec = &frontRecord{}
		}
		rec.Address = addr.String()
		if err := statefile.WriteJSON(filepath.Join(dir, frontFile), rec); err != nil {
			return err
		}
		// The address lives on the internet namespace's loopback: every link's routes lead there.
		if err := hostnet.Address(inet.Netns, "lo", netip.PrefixFrom(addr, 32)); err != nil {
			return fmt.Errorf("the front door's address: %w", err)
		}
		tokenPath := filepath.Join(dir, frontTokenFile)
		if err := ensureToken(tokenPath); err != nil {
			return err
		}
		sock := filepath.Join(dir, frontSocket)
		out = Front{DataAddress: addr, AdminSocket: sock, AdminURL: "http://" + frontAdminHost, TokenFile: tokenPath}
		if hostproc.Alive(rec.PID, rec.Start) {
			out.PID = rec.PID
			return nil
		}
		// A front door started by a process that crashed before recording it holds the socket.
		if err := hostproc.KillStrays(ctx, tokenPath); err != nil {
			return err
		}
		pid, start, err := hostproc.StartDetached(filepath.Join(dir, frontLogFile), filepath.Join(hostnet.NetnsDir, inet.Netns), 0,
			l.opts.HerdBinary, "front", "--admin-addr", "unix:"+sock, "--token-file", tokenPath)
		if err != nil {
			return fmt.Errorf("start the front door: %w", err)
		}
		rec.PID, rec.Start = pid, start
		if err := statefile.WriteJSON(filepath.Join(dir, frontFile), rec); err != nil {
			_ = hostproc.Stop(context.WithoutCancel(ctx), pid, start, lbStopTimeout)
			return err
		}
		if err := waitAdmin(ctx, pid, start, "unix", sock, filepath.Join(dir, frontLogFile)); err != nil {
			return fmt.Errorf("start the front door: %w", err)
		}
		out.PID = pid
		l.log.Info("front door started", "pid", pid, "data_address", addr, "admin", sock)
		return nil
	})
	if err != nil {
		return Front{}, fmt.Errorf("front door: %w", err)
	}
	return out, nil
}

// RemoveFront stops the front door (SIGTERM, 15 s to drain, then SIGKILL) and gives its address back
// (and removes the internet namespace, if nothing else is linked to it).
func (l *Lab) RemoveFront(ctx context.Context) error {
	return l.opts.Instances.Lock(func() error { return l.removeFront(ctx) })
}

// removeFront is RemoveFront; the caller holds the lock.
func (l *Lab) removeFront(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	dir := l.frontDir()
	rec, err := statefile.Load[frontRecord](filepath.Join(dir, frontFile))
	if err != nil {
		return err
	}
	if rec == nil {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		rec = &frontRecord{}
	}
	if err := hostproc.Stop(ctx, rec.PID, rec.Start, lbStopTimeout); err != nil {
		return fmt.Errorf("stop the front door: %w", err)
	}
	// One started by a process that crashed before recording it.
	if err := hostproc.KillStrays(ctx, filepath.Join(dir, frontTokenFile)); err != nil {
		return err
	}
	inetNs := internetNetns(l.opts.DataDir)
	if rec.Address != "" && hostnet.NetnsExists(inetNs) {
		if a, err := netip.ParseAddr(rec.Address); err == nil {
			_ = hostnet.RemoveAddress(inetNs, "lo", netip.PrefixFrom(a, 32)) // gone with a namespace made again
		}
	}
	if err := l.releaseInternet(ctx, frontHostKey); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	l.pruneNetDir()
	l.log.Info("front door removed")
	return nil
}
