// The regional load balancer: `herd lb` running in a region's router namespace, outliving herd
// up like the instances' agents, configured by the controller over its admin API.

package netlab

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/hostproc"
	"herd.dev/herd/internal/statefile"
)

// Files and ports of a region's load balancer, in net/regions/<region>/.
const (
	lbTokenFile = "lb-token"
	lbLogFile   = "lb.log"
	// LBAdminPort is the port of a regional load balancer's admin API, on the router's address
	// on the region bridge.
	LBAdminPort = 9443
	// lbStopTimeout bounds how long the load balancer drains after SIGTERM before it is killed.
	lbStopTimeout = 15 * time.Second
	// lbStartTimeout bounds how long a new load balancer may take to serve its admin API.
	lbStartTimeout = 20 * time.Second
)

// RegionLB tells how to reach a region's load balancer.
type RegionLB struct {
	Region string
	// DataAddress is where clients reach the load balancer's listeners: the router's address on
	// the internet. Listeners bound to ":<port>" (or to this address) serve there.
	DataAddress netip.Addr
	// AdminURL is the admin API (lb.NewAdminHandler), on the router's address on the region
	// bridge: the host reaches it directly, also while the region is partitioned.
	AdminURL string
	// TokenFile holds the admin API's bearer token (mode 0600). It is a secret: never log it.
	TokenFile string
	// PID is the load balancer's process.
	PID int
}

// EnsureRegionLB starts the region's load balancer in its router namespace, or adopts the one
// that runs (started by an earlier herd up), and says how to reach it. A new one serves no
// listener until it is configured over its admin API; a running one keeps its configuration.
// The region's network must exist (EnsureRegion, or an instance in the region).
func (l *Lab) EnsureRegionLB(ctx context.Context, region string) (RegionLB, error) {
	var out RegionLB
	err := l.opts.Instances.Lock(func() error {
		dir := l.regionNetDir(region)
		rn, err := readRegionNet(dir)
		if err != nil {
			return err
		}
		if rn == nil || rn.Phase != netReady {
			return fmt.Errorf("region %s has no network on this host: create an instance in it, or call EnsureRegion, first", region)
		}
		tokenPath := filepath.Join(dir, lbTokenFile)
		if err := ensureToken(tokenPath); err != nil {
			return err
		}
		admin := net.JoinHostPort(rn.LANAddress, strconv.Itoa(LBAdminPort))
		out = RegionLB{
			Region:    region,
			AdminURL:  "http://" + admin,
			TokenFile: tokenPath,
		}
		out.DataAddress, _ = netip.ParseAddr(rn.WANAddress)
		if hostproc.Alive(rn.LBPID, rn.LBStart) {
			out.PID = rn.LBPID
			return nil
		}
		// A load balancer started by a process that crashed before recording it holds the port.
		if err := hostproc.KillStrays(ctx, tokenPath); err != nil {
			return err
		}
		pid, start, err := hostproc.StartDetached(filepath.Join(dir, lbLogFile), filepath.Join(hostnet.NetnsDir, rn.RouterNetns), 0,
			l.opts.HerdBinary, "lb", "--admin-addr", admin, "--token-file", tokenPath)
		if err != nil {
			return fmt.Errorf("start the load balancer: %w", err)
		}
		rn.LBPID, rn.LBStart = pid, start
		if err := writeRegionNet(dir, rn); err != nil {
			_ = hostproc.Stop(context.WithoutCancel(ctx), pid, start, lbStopTimeout)
			return err
		}
		if err := waitAdmin(ctx, pid, start, "tcp", admin, filepath.Join(dir, lbLogFile)); err != nil {
			return fmt.Errorf("start the load balancer: %w", err)
		}
		out.PID = pid
		l.log.Info("regional load balancer started", "region", region, "pid", pid, "admin", out.AdminURL, "data_address", out.DataAddress)
		return nil
	})
	if err != nil {
		return RegionLB{}, fmt.Errorf("region %s: %w", region, err)
	}
	return out, nil
}

// waitAdmin waits until the load balancer just started as pid serves its admin API at addr, up to
// lbStartTimeout; if it exits first, the error quotes the end of its log.
func waitAdmin(ctx context.Context, pid int, start uint64, network, addr, logPath string) error {
	var died bool
	err := hostproc.WaitFor(ctx, lbStartTimeout, func() bool {
		if died = !hostproc.Alive(pid, start); died {
			return true
		}
		c, err := net.DialTimeout(network, addr, time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	}, "the admin API at "+addr)
	if err == nil && died {
		err = errors.New("it exited: " + hostproc.LogTail(logPath, 5))
	}
	return err
}

// ensureToken writes a new random token to path (0600) unless it holds one.
func ensureToken(path string) error {
	if data, err := os.ReadFile(path); err == nil && len(data) > 0 {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read the load balancer's token: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	return statefile.WriteAtomic(path, []byte(hex.EncodeToString(b)+"\n"))
}
