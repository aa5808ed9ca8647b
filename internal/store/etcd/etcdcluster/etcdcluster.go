// Package etcdcluster runs a cluster of real etcd server processes on loopback, for development
// and tests of the etcd store. Every member keeps its data and its log under one directory, listens
// on ports chosen free, and is recorded (name, URLs, process id) in DIR/cluster.json, so that
// another process (hack/etcd-cluster.sh stop DIR) can stop the cluster it did not start.
//
// It runs the etcd server found on the machine: Debian's etcd-server package (3.4), which
// hack/install-deps.sh installs because every local instance already runs it. The store's client
// (go.etcd.io/etcd/client/v3 3.6) speaks the same v3 API to it; nothing is built from source.
package etcdcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Config says what cluster to start.
type Config struct {
	// Dir holds the members' data, logs and cluster.json. Required; created if missing.
	Dir string
	// Members is the cluster's size. Default: 3.
	Members int
	// Binary is the etcd server. Default: FindBinary.
	Binary string
	// Args are added to every member's command line, e.g. --max-txn-ops=1024.
	Args []string
	// Timeout bounds the wait for the cluster to become healthy. Default: 30s.
	Timeout time.Duration
	// DieWithParent kills the members when the process that started them dies, so that a test
	// that crashes leaves no etcd behind. Off for the command, whose cluster outlives it.
	DieWithParent bool
}

// FastElection are member arguments for a cluster that elects a leader within half a second of
// losing one (heartbeat 50 ms, election timeout 500 ms, against etcd's 100 ms and 1 s), which
// also lowers etcd's minimum lease TTL (1.5 election timeouts, rounded up to whole seconds) from
// 2 s to 1 s: herd up replicas on such a cluster can use a 1 s leader lease. Fit for loopback
// and a LAN; over a WAN keep etcd's defaults.
var FastElection = []string{"--heartbeat-interval=50", "--election-timeout=500"}

// Member is one etcd server of the cluster.
type Member struct {
	Name      string `json:"name"`
	ClientURL string `json:"clientURL"`
	PeerURL   string `json:"peerURL"`
	PID       int    `json:"pid"`
	// DataDir and Log are under the cluster's Dir.
	DataDir string   `json:"dataDir"`
	Log     string   `json:"log"`
	Args    []string `json:"args"`
	// exited is closed when the member's process, started by this process, has been reaped.
	exited chan struct{}
}

// Cluster is a running (or stopped) set of members.
type Cluster struct {
	Dir     string    `json:"dir"`
	Binary  string    `json:"binary"`
	Members []*Member `json:"members"`
}

// FindBinary returns the etcd server to run: $HERD_ETCD if set, else etcd on $PATH, else
// Debian's /usr/bin/etcd.
func FindBinary() (string, error) {
	if p := os.Getenv("HERD_ETCD"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	return "", errors.New("no etcd server found: install Debian's etcd-server (hack/install-deps.sh does) or set HERD_ETCD to an etcd binary")
}

// Start starts a new cluster in cfg.Dir and waits until every member answers and they agree on a
// leader. On failure it stops what it started and says why, with the tail of the failing
// member's log.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcd cluster: Dir is empty: say where the members keep their data")
	}
	if cfg.Members <= 0 {
		cfg.Members = 3
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Binary == "" {
		b, err := FindBinary()
		if err != nil {
			return nil, err
		}
		cfg.Binary = b
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("etcd cluster: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, stateFile)); err == nil {
		return nil, fmt.Errorf("etcd cluster: %s already holds a cluster: stop it first, or choose another directory", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("etcd cluster: %w", err)
	}
	ports, err := freePorts(2 * cfg.Members)
	if err != nil {
		return nil, fmt.Errorf("etcd cluster: choose ports: %w", err)
	}
	c := &Cluster{Dir: dir, Binary: cfg.Binary}
	var initial []string
	for i := range cfg.Members {
		name := "m" + strconv.Itoa(i)
		m := &Member{
			Name:      name,
			ClientURL: "http://127.0.0.1:" + strconv.Itoa(ports[2*i]),
			PeerURL:   "http://127.0.0.1:" + strconv.Itoa(ports[2*i+1]),
			DataDir:   filepath.Join(dir, name),
			Log:       filepath.Join(dir, name+".log"),
		}
		c.Members = append(c.Members, m)
		initial = append(initial, name+"="+m.PeerURL)
	}
	for _, m := range c.Members {
		m.Args = append([]string{
			"--name=" + m.Name,
			"--data-dir=" + m.DataDir,
			"--listen-client-urls=" + m.ClientURL,
			"--advertise-client-urls=" + m.ClientURL,
			"--listen-peer-urls=" + m.PeerURL,
			"--initial-advertise-peer-urls=" + m.PeerURL,
			"--initial-cluster=" + strings.Join(initial, ","),
			"--initial-cluster-state=new",
			"--initial-cluster-token=herd-" + filepath.Base(dir),
		}, cfg.Args...)
		if err := c.start(m, cfg.DieWithParent); err != nil {
			_ = c.Stop()
			return nil, err
		}
	}
	if err := c.save(); err != nil {
		_ = c.Stop()
		return nil, err
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	if err := c.WaitHealthy(wctx, c.Members...); err != nil {
		_ = c.Stop()
		return nil, err
	}
	return c, nil
}

const stateFile = "cluster.json"

// Load reads the cluster that Start recorded in dir.
func Load(dir string) (*Cluster, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, fmt.Errorf("etcd cluster: %w (was it started with this directory?)", err)
	}
	var c Cluster
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("etcd cluster: %s: %w", filepath.Join(dir, stateFile), err)
	}
	return &c, nil
}

func (c *Cluster) save() error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, stateFile), b, 0o600); err != nil {
		return fmt.Errorf("etcd cluster: %w", err)
	}
	return nil
}

// Endpoints returns every member's client URL.
func (c *Cluster) Endpoints() []string {
	var eps []string
	for _, m := range c.Members {
		eps = append(eps, m.ClientURL)
	}
	return eps
}

// start runs m's etcd server in its own process group, its output appended to m.Log.
func (c *Cluster) start(m *Member, dieWithParent bool) error {
	log, err := os.OpenFile(m.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("etcd cluster: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(c.Binary, m.Args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if dieWithParent {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("etcd cluster: start member %s: %w", m.Name, err)
	}
	m.PID = cmd.Process.Pid
	m.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(m.exited)
	}()
	return nil
}

// Restart starts a stopped member again on its data directory and waits until it has rejoined.
func (c *Cluster) Restart(ctx context.Context, m *Member) error {
	if c.running(m) {
		return fmt.Errorf("etcd cluster: member %s is still running (pid %d)", m.Name, m.PID)
	}
	args := make([]string, 0, len(m.Args))
	for _, a := range m.Args {
		if !strings.HasPrefix(a, "--initial-cluster-state=") {
			args = append(args, a)
		}
	}
	m.Args = append(args, "--initial-cluster-state=existing")
	if err := c.start(m, true); err != nil {
		return err
	}
	if err := c.save(); err != nil {
		return err
	}
	return c.WaitHealthy(ctx, m)
}

// Kill stops m at once with SIGKILL, as a crash would, and waits until its process is gone.
func (c *Cluster) Kill(m *Member) error {
	return c.stop(m, syscall.SIGKILL)
}

// Stop stops every member (SIGTERM, then SIGKILL after 10 s) and waits until they are gone. It
// removes nothing: the data and the logs stay in Dir.
func (c *Cluster) Stop() error {
	var errs []error
	for _, m := range c.Members {
		errs = append(errs, c.stop(m, syscall.SIGTERM))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.Remove(filepath.Join(c.Dir, stateFile))
}

func (c *Cluster) stop(m *Member, sig syscall.Signal) error {
	if !c.running(m) {
		return nil
	}
	if err := syscall.Kill(m.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("etcd cluster: signal member %s (pid %d): %w", m.Name, m.PID, err)
	}
	if c.waitGone(m, 10*time.Second) {
		return nil
	}
	_ = syscall.Kill(m.PID, syscall.SIGKILL)
	if c.waitGone(m, 10*time.Second) {
		return nil
	}
	return fmt.Errorf("etcd cluster: member %s (pid %d) did not exit", m.Name, m.PID)
}

// running reports whether m's process is alive and still the etcd of m: the process id must name
// a process whose command line holds m's data directory, so that a stale cluster.json never
// makes Stop signal an unrelated process that got the id since.
func (c *Cluster) running(m *Member) bool {
	if m.exited != nil {
		select {
		case <-m.exited:
			return false
		default:
			return true
		}
	}
	if m.PID <= 0 {
		return false
	}
	cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(m.PID) + "/cmdline")
	if err != nil {
		return false
	}
	return strings.Contains(string(cmdline), "--data-dir="+m.DataDir+"\x00")
}

// waitGone waits up to d for m's process to end: on its reaper when this process started it,
// else by looking at /proc (the process belongs to whoever started it).
func (c *Cluster) waitGone(m *Member, d time.Duration) bool {
	deadline := time.After(d)
	if m.exited != nil {
		select {
		case <-m.exited:
			return true
		case <-deadline:
			return false
		}
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for c.running(m) {
		select {
		case <-tick.C:
		case <-deadline:
			return false
		}
	}
	return true
}

// freePorts returns n distinct loopback ports that were free a moment ago. All are held open
// until all are chosen, so the same port is never handed out twice.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// logTail returns the last lines of m's log, for errors.
func logTail(m *Member) string {
	b, _ := os.ReadFile(m.Log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-8):], "\n")
}
