// Package upstream boots a one-node cluster from the pinned upstream Kubernetes components (built
// by `make kubernetes`) with Debian's containerd, runc, CNI plugins and etcd (installed by
// `make deps`). It is the distribution of local instances; docs/local-instance.md records the
// configuration, the boot order and the pitfalls it follows.
package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"herd.dev/herd/internal/agent/cgroups"
	"herd.dev/herd/internal/agent/distro"
	"herd.dev/herd/internal/agent/pki"
	"herd.dev/herd/internal/agent/proc"
	"herd.dev/herd/internal/kubebin"
)

// Name is the distribution's name in a NodeImage.
const Name = "upstream"

// Distro is the upstream distribution.
type Distro struct{}

var _ distro.Distro = (*Distro)(nil)

// New returns the upstream distribution.
func New() *Distro { return &Distro{} }

// Name returns "upstream".
func (*Distro) Name() string { return Name }

// binaries are the executables a node runs.
type binaries struct {
	containerd, ctr, etcd                   string
	apiserver, controllerManager, scheduler string
	kubelet, kubeProxy                      string
	combined                                string // "" when kube-combined is not built
}

// findBinaries locates every executable, naming the make target that provides a missing one.
// metrics says that the node serves resource metrics, which only kube-combined runs.
func findBinaries(metrics bool) (binaries, error) {
	var b binaries
	var errs []error
	look := func(dst *string, name string) {
		p, err := exec.LookPath(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s not found on PATH: run make deps (hack/install-deps.sh)", name))
			return
		}
		*dst = p
	}
	look(&b.containerd, "containerd")
	look(&b.ctr, "ctr")
	look(&b.etcd, "etcd")
	var runc, iptables, nft string
	look(&runc, "runc")
	look(&iptables, "iptables")
	look(&nft, "nft") // kube-proxy's rules (nftables mode)
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		errs = append(errs, errors.New("CNI plugins missing from /usr/lib/cni: run make deps (hack/install-deps.sh)"))
	}
	if p, err := kubebin.Path(combinedName); err == nil {
		b.combined = p
	} else if metrics {
		errs = append(errs, fmt.Errorf("the image's metrics add-on runs in %s: %w", combinedName, err))
	}
	kube := func(dst *string, name string) {
		if b.combined != "" && slices.Contains(combinedComponents, name) {
			// kube-combined runs it, so its own binary is not needed: a machine's disk
			// (internal/disk) carries kube-combined alone.
			return
		}
		p, err := kubebin.Path(name)
		if err != nil {
			errs = append(errs, err)
			return
		}
		*dst = p
	}
	kube(&b.apiserver, "kube-apiserver")
	kube(&b.controllerManager, "kube-controller-manager")
	kube(&b.scheduler, "kube-scheduler")
	kube(&b.kubelet, "kubelet")
	kube(&b.kubeProxy, "kube-proxy")
	return b, errors.Join(errs...)
}

// validate checks a spec before anything is written.
func validate(spec distro.Spec) error {
	if spec.Name == "" {
		return errors.New("upstream: the instance needs a name")
	}
	if !spec.Address.IsValid() || !spec.Address.Is4() {
		return fmt.Errorf("upstream: address %q: want an IPv4 address", spec.Address)
	}
	if PodCIDR.Contains(spec.Address) || ServiceCIDR.Contains(spec.Address) {
		return fmt.Errorf("upstream: address %s is inside the instance's pod range %s or service range %s: give the instance an address outside both", spec.Address, PodCIDR, ServiceCIDR)
	}
	if spec.PauseImage == "" {
		return errors.New("upstream: the bundle names no pause image")
	}
	if dns := spec.ClusterDNS; dns.IsValid() && (!ServiceCIDR.Contains(dns) || dns == firstServiceIP()) {
		return fmt.Errorf("upstream: the bundle's cluster DNS address %s is not a free address of the Service range %s: rebuild the node image with this herd", dns, ServiceCIDR)
	}
	if v := spec.Version; v != "" && v != kubebin.Version {
		return fmt.Errorf("upstream: the bundle wants Kubernetes %s but this herd runs %s: rebuild the node image with this herd", v, kubebin.Version)
	}
	return nil
}

// node is a started upstream node.
type node struct {
	spec  distro.Spec
	log   *slog.Logger
	bins  binaries
	cfg   nodeConfig
	adm   distro.Access
	admin *http.Client

	runtimeReady chan struct{}
	apiReady     chan struct{}
	failed       chan struct{}
	failOnce     sync.Once
	failErr      error

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	procs    map[string]*proc.Process
	stopping bool
}

var _ distro.Node = (*node)(nil)

// Start prepares the state dir and starts containerd, etcd and kube-apiserver at once; when the
// API server is ready it starts kube-controller-manager, kube-scheduler, the kubelet and
// kube-proxy together. (Starting everything at once was slower on 2 cores: the early components
// compete with the API server's start-up, then wait in their retry back-off.)
func (d *Distro) Start(ctx context.Context, spec distro.Spec) (distro.Node, error) {
	if err := validate(spec); err != nil {
		return nil, err
	}
	bins, err := findBinaries(spec.ResourceMetrics)
	if err != nil {
		return nil, fmt.Errorf("upstream: %w", err)
	}
	if spec.ClusterDNS.IsValid() && bins.combined == "" {
		return nil, fmt.Errorf("upstream: %w", errDNSNeedsCombined)
	}
	log := spec.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if spec.Step == nil {
		spec.Step = func(string) {}
	}
	l := layout{state: spec.StateDir}
	for _, dir := range l.dirs() {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("upstream: %w", err)
		}
	}
	if err := privateRuntimeDirs(l); err != nil {
		return nil, err
	}
	if spec.WarmStore != "" {
		if err := seedStore(spec.WarmStore, l.etcdData()); err != nil {
			return nil, err
		}
	}
	if err := unlimitRejects(procSys); err != nil {
		// Only the first answer's promptness depends on it.
		log.Warn("clients of a Service without ready endpoints may wait for their SYN's retransmission", "err", err)
	}
	cfg := nodeConfig{name: spec.Name, address: spec.Address, cgroupRoot: spec.CgroupRoot, pauseImage: spec.PauseImage, clusterDNS: spec.ClusterDNS, stubZones: spec.StubZones, metrics: spec.ResourceMetrics, patient: spec.Patient, warm: spec.WarmStore != "", l: l}
	adm, err := writeCredentials(cfg)
	if err != nil {
		return nil, err
	}
	if err := writeConfigs(cfg); err != nil {
		return nil, err
	}
	if err := writeCorefile(cfg); err != nil {
		return nil, err
	}
	spec.Step("configuration written")
	admin, err := adminClient(adm)
	if err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n := &node{
		spec: spec, log: log, bins: bins, cfg: cfg, adm: adm, admin: admin,
		runtimeReady: make(chan struct{}),
		apiReady:     make(chan struct{}),
		failed:       make(chan struct{}),
		cancel:       cancel,
		procs:        map[string]*proc.Process{},
	}
	// The pods' masquerade rule is written while the first components start; the kubelet,
	// which starts the pods, starts after it.
	masquerading := make(chan error, 1)
	go func() { masquerading <- masqueradePods(PodCIDR) }()
	first, rest := processes(bins, cfg)
	for _, s := range first {
		if err := n.start(s); err != nil {
			cancel()
			_ = n.Stop(context.Background())
			return nil, err
		}
	}
	if err := forgetGonePodsHere(ctx, log); err != nil {
		// Only a new pod that never speaks first at a reused address is slow to reach.
		log.Warn("a new pod at a gone pod's address may be unreachable from the node for seconds", "err", err)
	}
	n.goWatch(ctx, "containerd ready", n.runtimeReady, n.containerdAnswers)
	n.goWatch(ctx, "etcd healthy", nil, n.etcdHealthy)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		// A node that starts from the warm store has the objects the API server's bootstrap
		// hooks write (after a second's sleep each) already: its other components and the
		// manifests need not wait for the hooks' reconciliation to end.
		if spec.WarmStore != "" {
			if !poll(ctx, n.checks().interval, n.apiServerServing) {
				return
			}
			spec.Step("kube-apiserver serving")
		}
		next := func() {
			if err := <-masquerading; err != nil {
				n.fail(err)
				return
			}
			for _, s := range rest {
				if err := n.start(s); err != nil {
					n.fail(err)
					return
				}
			}
			spec.Step("node components started")
			close(n.apiReady)
		}
		if spec.WarmStore != "" {
			next()
		}
		if !poll(ctx, n.checks().interval, n.apiServerReady) {
			return
		}
		spec.Step("kube-apiserver ready")
		if spec.WarmStore == "" {
			next()
		}
	}()
	return n, nil
}

// start starts one component and watches it, unless the node is stopping.
func (n *node) start(s proc.Spec) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.stopping {
		return errors.New("upstream: node is stopping")
	}
	s.LogDir = n.cfg.l.logs()
	s.Env = append(s.Env, componentEnv(s.Name)...)
	p, err := proc.Start(s)
	if err != nil {
		return fmt.Errorf("upstream: %w", err)
	}
	n.procs[s.Name] = p
	n.log.Debug("started", "process", s.Name, "pid", p.Pid())
	n.spec.Step(s.Name + " started")
	go func() {
		<-p.Done()
		if ee, ok := p.Unexpected(); ok {
			n.fail(ee)
		}
	}()
	return nil
}

// goWatch polls check until it passes, then records step and closes done (if not nil).
func (n *node) goWatch(ctx context.Context, step string, done chan struct{}, check func(context.Context) bool) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if !poll(ctx, 20*time.Millisecond, check) {
			return
		}
		n.spec.Step(step)
		if done != nil {
			close(done)
		}
	}()
}

// poll calls check every interval until it returns true (then poll returns true) or ctx ends.
func poll(ctx context.Context, interval time.Duration, check func(context.Context) bool) bool {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if check(ctx) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

func (n *node) containerdAnswers(context.Context) bool {
	c, err := net.DialTimeout("unix", n.cfg.l.containerdSocket(), time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

func (n *node) etcdHealthy(ctx context.Context) bool {
	return httpOK(ctx, http.DefaultClient, etcdClientURL+"/health", "", n.checks().timeout)
}

func (n *node) apiServerReady(ctx context.Context) bool {
	return httpOK(ctx, n.admin, n.adm.Server+"/readyz", n.adm.Token, n.checks().timeout)
}

// bootstrapChecks are the API server's readiness checks of its post-start hooks that write the
// cluster's bootstrap objects (the default RBAC policy, the system priority classes, API Priority
// and Fairness' configuration), each after a second's sleep: on a warm store, they find them.
var bootstrapChecks = []string{
	"poststarthook/rbac/bootstrap-roles",
	"poststarthook/scheduling/bootstrap-system-priority-classes",
	"poststarthook/priority-and-fairness-config-producer",
}

// apiServerServing reports whether the API server is ready but for bootstrapChecks.
func (n *node) apiServerServing(ctx context.Context) bool {
	q := url.Values{"exclude": bootstrapChecks}
	return httpOK(ctx, n.admin, n.adm.Server+"/readyz?"+q.Encode(), n.adm.Token, n.checks().timeout)
}

// checks are how often the API server's readiness is asked, and how long an answer may take.
type checks struct{ interval, timeout time.Duration }

// checks are a second's bound, asked every 100 ms; a Patient node's are 10 s, asked every
// second: a starved API server would otherwise spend itself on TLS handshakes abandoned after a
// second, one every 100 ms.
func (n *node) checks() checks {
	if n.spec.Patient {
		return checks{interval: time.Second, timeout: 10 * time.Second}
	}
	return checks{interval: 100 * time.Millisecond, timeout: time.Second}
}

// httpOK reports whether GET url answers 200 within timeout.
func httpOK(ctx context.Context, c *http.Client, url, token string, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// adminClient is an HTTP client that trusts the node's CA.
func adminClient(a distro.Access) (*http.Client, error) {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(a.CAPEM) {
		return nil, errors.New("upstream: the CA certificate does not parse")
	}
	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 1,
		IdleConnTimeout:     10 * time.Second,
	}
	// No client-wide timeout: each check's context bounds it (checks).
	return &http.Client{Transport: tr}, nil
}

func (n *node) fail(err error) {
	n.mu.Lock()
	stopping := n.stopping
	n.mu.Unlock()
	if stopping {
		return
	}
	n.failOnce.Do(func() {
		n.failErr = err
		close(n.failed)
	})
}

func (n *node) RuntimeReady() <-chan struct{} { return n.runtimeReady }
func (n *node) APIReady() <-chan struct{}     { return n.apiReady }
func (n *node) Failed() <-chan struct{}       { return n.failed }
func (n *node) Access() distro.Access         { return n.adm }

func (n *node) Err() error {
	select {
	case <-n.failed:
		return n.failErr
	default:
		return nil
	}
}

// ImportImage imports an image tar with ctr into containerd's k8s.io namespace, where the CRI
// plugin (and so the kubelet) sees it.
func (n *node) ImportImage(ctx context.Context, ref, tarPath string) error {
	cmd := exec.CommandContext(ctx, n.bins.ctr, "--address", n.cfg.l.containerdSocket(), "--namespace", ContainerdNamespace,
		"images", "import", tarPath)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("importing image %s from %s: %w: %s", ref, filepath.Base(tarPath), err, strings.TrimSpace(lastBytes(out, 2000)))
	}
	return nil
}

func lastBytes(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// stopOrder is the order of stopping: the reverse of starting. Components in one group stop
// together.
var stopOrder = [][]string{
	{"kube-proxy", "kubelet", "kube-scheduler", "kube-controller-manager", combinedName},
	{"kube-apiserver"},
	{"etcd"},
	{"containerd"},
}

// Stop stops the components in reverse order. Before containerd it kills what is left of the
// pods (the pods' cgroups under the cgroup root) and containerd's shims.
func (n *node) Stop(ctx context.Context) error {
	n.mu.Lock()
	n.stopping = true
	n.mu.Unlock()
	n.cancel()
	n.wg.Wait()
	grace := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl) / time.Duration(len(stopOrder)+1); d < grace {
			grace = max(d, 200*time.Millisecond)
		}
	}
	for _, group := range stopOrder {
		if group[0] == "containerd" {
			n.killContainers()
		}
		var wg sync.WaitGroup
		for _, name := range group {
			n.mu.Lock()
			p := n.procs[name]
			n.mu.Unlock()
			if p == nil {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				p.Stop(grace)
				n.log.Debug("stopped", "process", p.Name(), "seconds", time.Since(start).Seconds())
			}()
		}
		wg.Wait()
	}
	n.admin.CloseIdleConnections()
	return nil
}

// killContainers kills every process left in the pods' cgroups and every shim of this node's
// containerd.
func (n *node) killContainers() {
	if n.spec.CgroupRoot != "" {
		if hs, err := cgroups.Hierarchies(); err == nil {
			cgroups.KillAll(hs, n.spec.CgroupRoot+"/kubepods", nil, 2*time.Second)
		}
	}
	for _, pid := range shimPids(n.cfg.l.containerdSocket()) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// shimPids returns the pids of the containerd shims serving the containerd at sock in this
// instance. The socket path is the same in every instance (each bind-mounts its own containerd
// directory there, in its own mount namespace), so a shim is this instance's only if it also
// shares the agent's mount namespace: matching the path alone would kill every instance's pods.
func shimPids(sock string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	ownNS, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt")); err != nil || ns != ownNS {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if len(args) == 0 || !strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") {
			continue
		}
		for i := 0; i+1 < len(args); i++ {
			if args[i] == "-address" && args[i+1] == sock {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}

// writeConfigs writes containerd's, the CNI's, the kubelet's and kube-proxy's configuration.
func writeConfigs(c nodeConfig) error {
	cni, err := cniConfig(c)
	if err != nil {
		return fmt.Errorf("upstream: CNI config: %w", err)
	}
	kubelet, err := kubeletConfig(c)
	if err != nil {
		return fmt.Errorf("upstream: kubelet config: %w", err)
	}
	proxy, err := kubeProxyConfig(c)
	if err != nil {
		return fmt.Errorf("upstream: kube-proxy config: %w", err)
	}
	for path, data := range map[string][]byte{
		c.l.config("containerd.toml"):                       []byte(containerdConfig(c)),
		filepath.Join(c.l.cniConfDir(), "10-herd.conflist"): cni,
		c.l.config("kubelet.yaml"):                          kubelet,
		c.l.config("kube-proxy.yaml"):                       proxy,
	} {
		if err := pki.WriteFile(path, data, 0o600); err != nil {
			return fmt.Errorf("upstream: %w", err)
		}
	}
	return nil
}
