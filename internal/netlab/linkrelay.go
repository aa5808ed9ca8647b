// The link relay: the process that carries a shaped link's packets between its two TUN devices,
// delaying and dropping them as the link's Shape says.
//
// Links are a pair of persistent TUN devices, one in each network namespace, with a relay
// process (`herd link-relay`) copying every IP packet from one to the other. Kernel netem would
// do the same inside the kernel, but it is not built into every kernel (this project's machine
// has no sch_netem and no modules); the relay needs only TUN, which every kernel herd runs on
// has. A relay that is not running carries nothing: the link is cut, never unshaped.

package netlab

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"herd.dev/herd/internal/hostnet"
	"herd.dev/herd/internal/statefile"
)

// LinkEnd is one end of a link: a persistent TUN device in a network namespace.
type LinkEnd struct {
	Netns  string `json:"netns"`
	Device string `json:"device"`
}

// LinkConfig is the relay's config file (written atomically, 0600; re-read on SIGHUP).
type LinkConfig struct {
	// Name names the link in logs ("region eu", "client home").
	Name string  `json:"name"`
	A    LinkEnd `json:"a"`
	B    LinkEnd `json:"b"`
	// Shape is applied to packets in both directions.
	Shape Shape `json:"shape"`
	// PeerLatency adds round-trip time to the packets between end A and some addresses beyond
	// end B (IPv4 address -> extra round trip): a client network's own distance to each region.
	PeerLatency map[netip.Addr]time.Duration `json:"peerLatency,omitempty"`
	// Generation changes with every write; the relay writes the generation it applies to
	// <config>.applied, so that whoever changed the shape can wait until it holds.
	Generation int64 `json:"generation"`
}

// appliedPath is where the relay acknowledges the config generation it applies.
func appliedPath(configPath string) string { return configPath + ".applied" }

// ReadApplied returns the config generation the relay of configPath last acknowledged, 0 if none.
func ReadApplied(configPath string) int64 {
	data, err := os.ReadFile(appliedPath(configPath))
	if err != nil {
		return 0
	}
	g, _ := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return g
}

// relayQueue bounds the packets in flight in one direction; more are dropped, as a full router
// queue drops them (at 1,500 bytes, 4,096 packets hold 6 MB: 1 Gbit/s for 50 ms).
const relayQueue = 4096

func readLinkConfig(path string) (LinkConfig, error) {
	var c LinkConfig
	if found, err := statefile.ReadJSON(path, &c); err != nil || !found {
		return c, fmt.Errorf("link config %s: %w", path, cmp.Or(err, fs.ErrNotExist))
	}
	if c.A.Netns == "" || c.A.Device == "" || c.B.Netns == "" || c.B.Device == "" {
		return c, fmt.Errorf("link config %s: both ends need a netns and a device", path)
	}
	return c, nil
}

// RunLinkRelay carries the packets of the link described by the config file until ctx ends or
// one of its devices goes away (its namespace was deleted). SIGHUP re-reads the file's shape.
// `herd link-relay` runs it; the local provider starts that detached for every link.
func RunLinkRelay(ctx context.Context, configPath string, log *slog.Logger) error {
	cfg, err := readLinkConfig(configPath)
	if err != nil {
		return err
	}
	log = log.With("component", "link-relay", "link", cfg.Name)
	a, err := openTun(cfg.A)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := openTun(cfg.B)
	if err != nil {
		return err
	}
	defer b.Close()

	ack := func(gen int64) {
		if err := statefile.WriteAtomic(appliedPath(configPath), []byte(strconv.FormatInt(gen, 10)+"\n")); err != nil {
			log.Error("acknowledge the config", "err", err)
		}
	}
	var shape atomic.Pointer[LinkConfig]
	shape.Store(&cfg)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
			}
			c, err := readLinkConfig(configPath)
			if err != nil {
				log.Error("link config not reloaded; the shape stays", "err", err)
				continue
			}
			shape.Store(&c)
			log.Info("shape changed", "shape", c.Shape.String())
			ack(c.Generation)
		}
	}()
	log.Info("relaying", "a", cfg.A.Netns+"/"+cfg.A.Device, "b", cfg.B.Netns+"/"+cfg.B.Device, "shape", cfg.Shape.String())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 2)
	go func() { errc <- relay(ctx, a, b, &shape, ipv4Dst) }()
	go func() { errc <- relay(ctx, b, a, &shape, ipv4Src) }()
	ack(cfg.Generation)
	select {
	case <-ctx.Done():
		return nil
	case err := <-errc:
		return fmt.Errorf("link %s: %w", cfg.Name, err)
	}
}

// openTun attaches to the persistent TUN device of end, from inside its namespace.
func openTun(end LinkEnd) (*os.File, error) {
	var f *os.File
	err := hostnet.InNetns(filepath.Join(hostnet.NetnsDir, end.Netns), func() error {
		fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(end.Device)
		if err != nil {
			unix.Close(fd)
			return err
		}
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			unix.Close(fd)
			return fmt.Errorf("attach to %s: %w", end.Device, err)
		}
		f = os.NewFile(uintptr(fd), end.Device)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("link end %s in netns %s: %w", end.Device, end.Netns, err)
	}
	return f, nil
}

// Offsets of the source and destination addresses in an IPv4 header.
const (
	ipv4Src = 12
	ipv4Dst = 16
)

// relay copies packets from one device to the other, each after its delay, dropping those the
// shape loses (the delay line says in which order they leave). peerAt is the offset in the IPv4
// header of the address beyond end B (the destination from A to B, the source from B to A).
func relay(ctx context.Context, from, to *os.File, cfg *atomic.Pointer[LinkConfig], peerAt int) error {
	q := make(chan delayed, relayQueue)
	werr := make(chan error, 1)
	go func() {
		if err := writeWhenDue(ctx, q, to); err != nil {
			werr <- err
		}
	}()
	rnd := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	buf := make([]byte, 65536)
	var sched scheduler
	for {
		n, err := from.Read(buf)
		if err != nil {
			return fmt.Errorf("read %s: %w", from.Name(), err)
		}
		select {
		case err := <-werr:
			return err
		default:
		}
		c := cfg.Load()
		if c.Shape.drops(rnd) {
			continue
		}
		delay := c.Shape.oneWayDelay(rnd)
		var class time.Duration
		if len(c.PeerLatency) > 0 && n >= 20 && buf[0]>>4 == 4 {
			class = c.PeerLatency[netip.AddrFrom4([4]byte(buf[peerAt:peerAt+4]))] / 2
			delay += class
		}
		select {
		case q <- sched.schedule(append([]byte(nil), buf[:n]...), time.Now(), delay, class):
		default: // queue full: dropped
		}
	}
}

// writeWhenDue writes the packets from q to the device as they fall due, holding at most
// relayQueue of them (while it holds that many, q fills and the reader drops).
func writeWhenDue(ctx context.Context, q <-chan delayed, to *os.File) error {
	var line delayLine
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var due <-chan time.Time
		if at, ok := line.next(); ok {
			wait := time.Until(at)
			if wait <= 0 {
				d := line.take()
				if _, err := to.Write(d.pkt); err != nil && !errors.Is(err, unix.EIO) && !errors.Is(err, unix.ENOBUFS) {
					// EIO: the other device is down for a moment; the packet is lost as on a wire.
					return fmt.Errorf("write %s: %w", to.Name(), err)
				}
				continue
			}
			timer.Reset(wait)
			due = timer.C
		}
		in := q
		if line.Len() >= relayQueue {
			in = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case d := <-in:
			line.add(d)
		case <-due:
		}
	}
}
