package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"herd.dev/herd/internal/busypoll"
	"herd.dev/herd/internal/lb"
)

// newLBCmd is `herd lb`: the load balancer alone, configured from a file and over its admin API, for a
// data plane that runs apart from the control plane.
func newLBCmd(g *globals) *cobra.Command {
	var configFile, adminAddr, tokenFile string
	cmd := &cobra.Command{
		Use:   "lb",
		Short: "Run the load balancer alone, in the foreground",
		Long: `Run herd's load balancer alone until Ctrl-C or SIGTERM, serving the listeners of -f FILE
(YAML or JSON; unknown fields are errors). SIGHUP re-reads the file.

The admin API on --admin-addr (GET/PUT /config, GET /health, /stats, /rtt, /metrics) lets a
controller elsewhere replace the whole config atomically; every request must carry the bearer token
of --token-file. --admin-addr unix:PATH serves it on a Unix socket (mode 0600) instead, for a load
balancer in a network namespace that the host cannot reach; "" turns the admin API off.
GET /rtt lists the round-trip time to each client network (/24, /48) as the kernel measured the
connections served: [{"network", "srtt_ms", "samples", "last_seen"}].

Run on one core (GOMAXPROCS=1, pinned with taskset, as HAProxy with one thread), the load balancer
keeps polling the network for --busy-poll after its last work instead of letting its core halt: on a
virtual machine every halt makes the next packet's sender interrupt the core to wake it. Polling
costs CPU while traffic flows (up to the whole core at moderate rates) and none when idle;
--busy-poll 0 turns it off. With more scheduler threads it stays off.`,
		Example: `  herd lb -f lb.yaml --token-file /etc/herd/lb-token
  curl -H "Authorization: Bearer $(cat /etc/herd/lb-token)" http://127.0.0.1:9443/health`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			log, err := g.logger()
			if err != nil {
				return err
			}
			return runLB(cmd, log, "herd lb", configFile, adminAddr, tokenFile)
		},
	}
	addLBFlags(cmd, &configFile, &adminAddr, &tokenFile)
	return cmd
}

func addLBFlags(cmd *cobra.Command, configFile, adminAddr, tokenFile *string) {
	cmd.Flags().StringVarP(configFile, "filename", "f", "", "load balancer config file (YAML or JSON); empty starts with no listeners")
	cmd.Flags().StringVar(adminAddr, "admin-addr", "127.0.0.1:9443", `address of the admin API, host:port or unix:PATH; "" turns it off`)
	cmd.Flags().StringVar(tokenFile, "token-file", "", "file holding the admin API's bearer token (required with --admin-addr)")
	cmd.Flags().Duration("busy-poll", defaultBusyPoll, "with GOMAXPROCS=1, how long to keep polling the network after the last work before the core may halt (0 turns it off)")
}

// defaultBusyPoll is how long a load balancer on one scheduler thread polls after its last work: the
// kernel's own default for a guest that polls before halting (guest_halt_poll_ns), and in make
// bench-lb the window at which the proxy's core is woken by interrupts no more often than HAProxy's
// (50 us left twice as many, and 3-4% fewer requests/s over TLS).
const defaultBusyPoll = 200 * time.Microsecond

// startBusyPoll starts polling as --busy-poll asks, and returns what stops it (nil when it does not
// run). Without GOMAXPROCS=1 the default stays off quietly; a --busy-poll given by hand that cannot
// run is reported.
func startBusyPoll(cmd *cobra.Command, log *slog.Logger, name string) (stop func(), err error) {
	window, _ := cmd.Flags().GetDuration("busy-poll")
	if window < 0 {
		return nil, fmt.Errorf("--busy-poll %v: must be 0 (off) or more, e.g. 50us", window)
	}
	if window == 0 {
		return nil, nil
	}
	stop, err = busypoll.Start(window)
	if err != nil {
		if cmd.Flags().Changed("busy-poll") || !errors.Is(err, busypoll.ErrNotOneProc) {
			log.Warn(name+": --busy-poll: running without busy polling", "error", err)
		}
		return nil, nil
	}
	return stop, nil
}

// runLB runs a load balancer (herd lb, herd front) until the command's context ends; name prefixes
// its progress lines.
func runLB(cmd *cobra.Command, log *slog.Logger, name, configFile, adminAddr, tokenFile string) error {
	ctx := cmd.Context() // Execute cancels it on Ctrl-C and SIGTERM

	var token string
	if adminAddr != "" {
		if tokenFile == "" {
			return errors.New(`--token-file is required to serve the admin API (or turn it off with --admin-addr "")`)
		}
		data, err := os.ReadFile(tokenFile)
		if err != nil {
			return fmt.Errorf("--token-file: %w", err)
		}
		if token = strings.TrimSpace(string(data)); token == "" {
			return fmt.Errorf("--token-file: %s is empty", tokenFile)
		}
	}

	stopPolling, err := startBusyPoll(cmd, log, name)
	if err != nil {
		return err
	}
	if stopPolling != nil {
		defer stopPolling()
	}
	b := lb.New(lb.Options{Logger: log})
	if configFile != "" {
		cfg, err := readLBConfig(configFile)
		if err != nil {
			return err
		}
		if err := b.Apply(cfg); err != nil {
			return fmt.Errorf("-f %s: %w", configFile, err)
		}
	}

	var admin *http.Server
	if adminAddr != "" {
		h, err := lb.NewAdminHandler(b, token, log)
		if err != nil {
			return err
		}
		ln, err := listenAdmin(adminAddr)
		if err != nil {
			return fmt.Errorf("--admin-addr: %w", err)
		}
		defer ln.Close()
		admin = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		go func() {
			if err := admin.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("admin API stopped", "error", err)
			}
		}()
		fmt.Fprintf(cmd.OutOrStdout(), "%s: admin API at %s\n", name, adminAddr)
	}

	if configFile != "" {
		go reloadOnHangup(ctx, b, configFile, log)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: serving %d listeners; Ctrl-C stops\n", name, len(b.Config().Listeners))
	err = b.Start(ctx)
	if admin != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = admin.Shutdown(shutdownCtx)
	}
	return err
}

// listenAdmin listens on host:port, or on the Unix socket of unix:PATH (mode 0600, replacing a
// socket file that a stopped load balancer left).
func listenAdmin(addr string) (net.Listener, error) {
	path, ok := strings.CutPrefix(addr, "unix:")
	if !ok {
		return net.Listen("tcp", addr)
	}
	if path == "" {
		return nil, errors.New(`"unix:" needs a path, e.g. unix:/run/herd/front.sock`)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("%s exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return nil, fmt.Errorf("%s is in use by a running process", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, err
		}
	}
	old := syscall.Umask(0o177) // the socket is created 0600: only its owner may connect
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	return ln, err
}

// reloadOnHangup re-applies the config file on every SIGHUP; a bad file is logged and changes nothing.
func reloadOnHangup(ctx context.Context, b *lb.LB, configFile string, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		cfg, err := readLBConfig(configFile)
		if err == nil {
			err = b.Apply(cfg)
		}
		if err != nil {
			log.Error("config not reloaded, the running one stays", "file", configFile, "error", err)
			continue
		}
		log.Info("config reloaded", "file", configFile)
	}
}

func readLBConfig(path string) (lb.Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return lb.Config{}, fmt.Errorf("-f: %w", err)
	}
	cfg, err := lb.ParseConfig(data)
	if err != nil {
		return lb.Config{}, fmt.Errorf("-f %s: %w", path, err)
	}
	return cfg, nil
}
