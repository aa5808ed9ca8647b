// Package agent is herd's in-instance agent: the process the provider starts inside an instance.
// It boots the instance's one-node Kubernetes from a node image bundle through a distribution
// (package distro and its implementations), imports the bundle's images into the node's
// container runtime, applies the bundle's manifests with server-side apply, and waits until the
// node is Ready and every baked Deployment, StatefulSet and DaemonSet is available before it
// reports Ready. No deploy step follows: the instance serves what its image holds.
//
// It reports through <state-dir>/status.json (see Status) and serves, on the instance address,
// /readyz, /livez and /metrics. On SIGTERM it stops the workload gracefully, then the cluster.
// docs/local-instance.md states the contract between the agent and the local provider.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"herd.dev/herd/internal/agent/cgroups"
	"herd.dev/herd/internal/agent/distro"
	"herd.dev/herd/internal/agent/distro/upstream"
	"herd.dev/herd/internal/agent/pki"
	"herd.dev/herd/internal/image"
)

// Defaults of Config.
const (
	// DefaultPort is the port of the agent's HTTP endpoints on the instance address.
	DefaultPort = 10260
	// DefaultReadyTimeout bounds the boot: from the agent's start until the node is Ready and
	// every baked workload is available.
	DefaultReadyTimeout = 3 * time.Minute
	// DefaultStopTimeout bounds the graceful stop of the workload on SIGTERM. The cluster's
	// components are stopped after it, within a few seconds more.
	DefaultStopTimeout = 10 * time.Second
)

// KubeconfigFile is the name of the administrator kubeconfig in the state dir (mode 0600).
const KubeconfigFile = "kubeconfig"

// Distributions returns the distributions this herd can boot, by name. Adding one is one line.
func Distributions() map[string]distro.Distro {
	return map[string]distro.Distro{
		upstream.Name: upstream.New(),
	}
}

// Config is what the agent is told.
type Config struct {
	// Name is the instance's name, also its node name: a DNS label. Required.
	Name string
	// BundleDir is the node image bundle to boot from. Required.
	BundleDir string
	// StateDir holds everything the agent and the cluster write. Required; made mode 0700.
	StateDir string
	// Address is the instance's IP address, where the API server, the kubelet and the agent's
	// endpoints listen. Required.
	Address netip.Addr
	// CgroupRoot confines the agent and everything it starts (e.g. "/herd-web-1"): the agent
	// moves itself into <CgroupRoot>/system and the kubelet puts pods under
	// <CgroupRoot>/kubepods. Default: none (stay where started; the distribution's default).
	CgroupRoot string
	// ReadyTimeout bounds the boot. Default: DefaultReadyTimeout.
	ReadyTimeout time.Duration
	// StopTimeout bounds the graceful stop of the workload. Default: DefaultStopTimeout.
	StopTimeout time.Duration
	// Port is the port of the HTTP endpoints. Default: DefaultPort.
	Port int
	// Logger receives the agent's log. Default: discard.
	Logger *slog.Logger
	// Distros are the distributions to choose from by the bundle's
	// spec.kubernetes.distribution. Default: Distributions().
	Distros map[string]distro.Distro
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// withDefaults fills the defaults in and checks the config.
func (c Config) withDefaults() (Config, error) {
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if c.StopTimeout == 0 {
		c.StopTimeout = DefaultStopTimeout
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Distros == nil {
		c.Distros = Distributions()
	}
	var errs []error
	if !dnsLabel.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("--name %q: want a DNS label (lower-case letters, digits and '-', at most 63)", c.Name))
	}
	if c.BundleDir == "" {
		errs = append(errs, errors.New("--bundle is required: the node image bundle directory"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("--state-dir is required"))
	}
	if !c.Address.IsValid() {
		errs = append(errs, errors.New("--address is required: the instance's IP address"))
	}
	if c.CgroupRoot != "" && (!strings.HasPrefix(c.CgroupRoot, "/") || path.Clean(c.CgroupRoot) != c.CgroupRoot || c.CgroupRoot == "/") {
		errs = append(errs, fmt.Errorf("--cgroup-root %q: want an absolute cgroup path below / such as /herd-%s", c.CgroupRoot, c.Name))
	}
	if c.ReadyTimeout < 0 || c.StopTimeout < 0 {
		errs = append(errs, errors.New("timeouts must be positive"))
	}
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d: want 1-65535", c.Port))
	}
	if c.StateDir != "" {
		abs, err := filepath.Abs(c.StateDir)
		if err != nil {
			errs = append(errs, err)
		}
		c.StateDir = abs
	}
	return c, errors.Join(errs...)
}

// live is what /readyz answers.
type live struct {
	ready  bool
	reason string
}

// agent is one run of the agent.
type agent struct {
	cfg    Config
	log    *slog.Logger
	start  time.Time
	status *statusWriter
	hs     []cgroups.Hierarchy

	live       atomic.Pointer[live]
	bootMillis atomic.Uint64 // milliseconds from start to Ready; 0 until then

	mu    sync.Mutex
	dyn   dynamic.Interface
	works []workloadRef
}

func (a *agent) setLive(ready bool, reason string) { a.live.Store(&live{ready: ready, reason: reason}) }

func (a *agent) client() dynamic.Interface {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.dyn
}

func (a *agent) bootSeconds() float64 {
	ms := a.bootMillis.Load()
	return float64(ms) / 1000
}

func (a *agent) step(name string) {
	a.log.Info("boot step", "step", name, "seconds", seconds(time.Since(a.start)))
	if err := a.status.step(name); err != nil {
		a.log.Error("writing status", "err", err)
	}
}

func (a *agent) setPhase(p Phase, reason string) {
	if err := a.status.set(p, reason); err != nil {
		a.log.Error("writing status", "err", err)
	}
}

// isolateFn is isolate; tests of the agent's life cycle replace it, as they do not run as root.
var isolateFn = isolate

// seconds formats a duration as seconds with millisecond precision, for logs.
func seconds(d time.Duration) string {
	return strconv.FormatFloat(d.Seconds(), 'f', 3, 64)
}

// errStop says that a stop was asked for (SIGTERM or SIGINT: ctx ended).
var errStop = errors.New("stop requested")

// Run runs the agent until ctx ends (SIGTERM, SIGINT) or the instance fails. It returns nil after
// a requested stop (status Stopped) and an error when the instance failed (status Failed).
func Run(ctx context.Context, cfg Config) error {
	start := time.Now()
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	a := &agent{cfg: cfg, log: cfg.Logger, start: start, status: newStatusWriter(filepath.Join(cfg.StateDir, StatusFile), start)}
	a.setLive(false, "booting")
	a.setPhase(PhaseBooting, "")

	hs, err := isolateFn(cfg.CgroupRoot, a.log)
	if err != nil {
		return a.failed(nil, err)
	}
	a.hs = hs
	a.step("isolated")

	b, err := loadBundle(cfg.BundleDir)
	if err != nil {
		return a.failed(nil, err)
	}
	files, err := readManifests(b)
	if err != nil {
		return a.failed(nil, err)
	}
	objs, err := decodeManifests(files)
	if err != nil {
		return a.failed(nil, fmt.Errorf("bundle %s: %w", b.ShortDigest(), err))
	}
	distName := b.Config.Kubernetes.Distribution
	if distName == "" {
		distName = upstream.Name
	}
	d, ok := cfg.Distros[distName]
	if !ok {
		var names []string
		for n := range cfg.Distros {
			names = append(names, n)
		}
		sort.Strings(names)
		return a.failed(nil, fmt.Errorf("bundle %s wants distribution %q, which this herd cannot boot (it has: %s)", b.ShortDigest(), distName, strings.Join(names, ", ")))
	}
	a.step("bundle verified")

	reg := prometheus.NewRegistry()
	reg.MustRegister(collector{a})
	ln, err := net.Listen("tcp", netip.AddrPortFrom(cfg.Address, uint16(cfg.Port)).String())
	if err != nil {
		return a.failed(nil, fmt.Errorf("agent endpoints: %w", err))
	}
	srv := &http.Server{Handler: a.handler(reg), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	node, err := d.Start(ctx, distro.Spec{
		Name:       cfg.Name,
		Address:    cfg.Address,
		StateDir:   cfg.StateDir,
		CgroupRoot: cfg.CgroupRoot,
		PauseImage: b.Config.PauseImage,
		Version:    b.Config.Kubernetes.Version,
		Logger:     a.log.With("distro", d.Name()),
		Step:       a.step,
	})
	if err != nil {
		return a.failed(nil, err)
	}

	err = a.boot(ctx, node, b, objs)
	switch {
	case errors.Is(err, errStop):
		return a.stop(node)
	case err != nil:
		return a.failed(node, err)
	}
	booted := time.Since(start)
	a.bootMillis.Store(uint64(booted.Milliseconds()))
	a.setLive(true, "")
	a.setPhase(PhaseReady, "")
	a.log.Info("ready", "seconds", seconds(booted))
	// The boot's garbage (decoded manifests, discovery) is gone: give the memory back now
	// rather than in minutes.
	debug.FreeOSMemory()

	if err := a.monitor(ctx, node); err != nil {
		return a.failed(node, err)
	}
	return a.stop(node)
}

// boot imports the images and applies the manifests as soon as the node allows, then waits
// until the node is Ready and every workload available. It returns errStop if ctx ends first.
func (a *agent) boot(ctx context.Context, node distro.Node, b image.Bundle, objs []object) error {
	bootCtx, cancel := context.WithDeadline(ctx, a.start.Add(a.cfg.ReadyTimeout))
	defer cancel()
	// wait waits for ch, the node's failure, the stop, or the boot's deadline.
	wait := func(ch <-chan struct{}, what string) error {
		select {
		case <-ch:
			return nil
		case <-node.Failed():
			return node.Err()
		case <-bootCtx.Done():
			if ctx.Err() != nil {
				return errStop
			}
			return fmt.Errorf("%s not within --ready-timeout %s", what, a.cfg.ReadyTimeout)
		}
	}

	// importErr is set before imported is closed.
	var importErr error
	imported := make(chan struct{})
	go func() {
		defer close(imported)
		if importErr = wait(node.RuntimeReady(), "container runtime ready"); importErr != nil {
			return
		}
		g, gctx := errgroup.WithContext(bootCtx)
		for _, im := range b.Config.Images {
			g.Go(func() error { return node.ImportImage(gctx, im.Ref, b.Path(im.File)) })
		}
		if importErr = g.Wait(); importErr == nil {
			a.step("images imported")
		}
	}()

	if err := wait(node.APIReady(), "API server ready"); err != nil {
		return err
	}
	acc := node.Access()
	kc, err := acc.Kubeconfig("herd-admin")
	if err != nil {
		return err
	}
	if err := pki.WriteFile(filepath.Join(a.cfg.StateDir, KubeconfigFile), kc, 0o600); err != nil {
		return fmt.Errorf("writing the kubeconfig: %w", err)
	}
	rc := &rest.Config{
		Host:            acc.Server,
		BearerToken:     acc.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: acc.CAPEM},
		QPS:             50,
		Burst:           100,
		UserAgent:       "herd-agent",
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.dyn = dyn
	a.mu.Unlock()

	if err := wait(imported, "images imported"); err != nil {
		return err
	}
	if importErr != nil {
		if ctx.Err() != nil {
			return errStop // an import cut short by the stop
		}
		return importErr
	}

	ap, err := newApplier(rc, dyn)
	if err != nil {
		return err
	}
	works, err := ap.apply(bootCtx, objs)
	if err != nil {
		if ctx.Err() != nil {
			return errStop
		}
		return err
	}
	a.mu.Lock()
	a.works = works
	a.mu.Unlock()
	a.step("manifests applied")

	return a.waitReady(ctx, bootCtx, node)
}

// waitReady polls until the node is Ready and every workload available.
func (a *agent) waitReady(ctx, bootCtx context.Context, node distro.Node) error {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var nodeReadySeen bool
	var terminalSince time.Time
	for i := 0; ; i++ {
		// The pods are looked at once a second, or at every poll while one looks terminal.
		withPods := i%5 == 4 || !terminalSince.IsZero()
		r := a.check(bootCtx, withPods)
		if r.nodeReady && !nodeReadySeen {
			nodeReadySeen = true
			a.step("node Ready")
		}
		if r.ready {
			a.step("workloads available")
			return nil
		}
		a.setLive(false, "booting: "+r.reason)
		if r.terminal {
			if terminalSince.IsZero() {
				terminalSince = time.Now()
			} else if time.Since(terminalSince) > 3*time.Second {
				return errors.New(r.reason)
			}
		} else {
			terminalSince = time.Time{}
		}
		select {
		case <-node.Failed():
			return node.Err()
		case <-bootCtx.Done():
			if ctx.Err() != nil {
				return errStop
			}
			last := a.check(context.Background(), true)
			return fmt.Errorf("not ready within --ready-timeout %s: %s", a.cfg.ReadyTimeout, last.reason)
		case <-t.C:
		}
	}
}

// monitor keeps /readyz current until ctx ends (nil) or a component fails (its error).
func (a *agent) monitor(ctx context.Context, node distro.Node) error {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-node.Failed():
			return node.Err()
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r := a.check(cctx, false)
		cancel()
		if ctx.Err() != nil {
			return nil
		}
		a.setLive(r.ready, r.reason)
	}
}

// readiness is the result of one check.
type readiness struct {
	ready     bool
	nodeReady bool
	reason    string // when not ready: everything not ready, "; "-separated
	terminal  bool   // a workload can never become available
}

// check evaluates the node and every workload. With withPods, a workload that is not available
// is explained by its pods' states.
func (a *agent) check(ctx context.Context, withPods bool) readiness {
	a.mu.Lock()
	dyn, works := a.dyn, a.works
	a.mu.Unlock()
	var r readiness
	var reasons []string
	var n corev1.Node
	if err := getTyped(ctx, dyn.Resource(nodesGVR), a.cfg.Name, &n); err != nil {
		if apierrors.IsNotFound(err) {
			reasons = append(reasons, fmt.Sprintf("node %s has not registered yet", a.cfg.Name))
		} else {
			reasons = append(reasons, fmt.Sprintf("node %s: %v", a.cfg.Name, err))
		}
	} else if v := nodeVerdict(&n); v.ready {
		r.nodeReady = true
	} else {
		reasons = append(reasons, v.why)
	}
	for _, w := range works {
		v, selector := a.workloadVerdict(ctx, dyn, w)
		if v.ready {
			continue
		}
		why := v.why
		if withPods && selector != "" {
			list, err := dyn.Resource(podsGVR).Namespace(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err == nil {
				pods := make([]corev1.Pod, len(list.Items))
				for i := range list.Items {
					_ = runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &pods[i])
				}
				rep, terminal := podsReport(pods)
				why += "; " + rep
				if terminal {
					v.terminal = true
				}
			}
		}
		sep := ": "
		if v.terminal {
			r.terminal = true
			sep = " can never become available: "
		}
		reasons = append(reasons, w.String()+sep+why)
	}
	r.ready = len(reasons) == 0
	r.reason = strings.Join(reasons, "; ")
	return r
}

// workloadVerdict fetches and evaluates one workload, and returns its pod selector.
func (a *agent) workloadVerdict(ctx context.Context, dyn dynamic.Interface, w workloadRef) (verdict, string) {
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: workloadKinds[w.Kind]}
	ri := dyn.Resource(gvr).Namespace(w.Namespace)
	var v verdict
	var sel *metav1.LabelSelector
	var err error
	switch w.Kind {
	case "Deployment":
		var d appsv1.Deployment
		if err = getTyped(ctx, ri, w.Name, &d); err == nil {
			v, sel = deploymentVerdict(&d), d.Spec.Selector
		}
	case "StatefulSet":
		var s appsv1.StatefulSet
		if err = getTyped(ctx, ri, w.Name, &s); err == nil {
			v, sel = statefulSetVerdict(&s), s.Spec.Selector
		}
	case "DaemonSet":
		var d appsv1.DaemonSet
		if err = getTyped(ctx, ri, w.Name, &d); err == nil {
			v, sel = daemonSetVerdict(&d), d.Spec.Selector
		}
	}
	if err != nil {
		return verdict{why: err.Error()}, ""
	}
	selector := ""
	if s, err := metav1.LabelSelectorAsSelector(sel); err == nil && sel != nil {
		selector = s.String()
	}
	return v, selector
}

// getTyped gets one object and converts it into out.
func getTyped(ctx context.Context, ri dynamic.ResourceInterface, name string, out any) error {
	u, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out)
}

// failed records Failed with err as the reason, stops what was started, and returns err.
func (a *agent) failed(node distro.Node, err error) error {
	a.setLive(false, "failed: "+err.Error())
	a.setPhase(PhaseFailed, err.Error())
	a.log.Error("instance failed", "reason", err.Error())
	a.teardown(node)
	return err
}

// stop stops the workload gracefully, then the cluster, and records Stopped.
func (a *agent) stop(node distro.Node) error {
	a.setLive(false, "stopping")
	a.setPhase(PhaseStopping, "stop requested")
	a.log.Info("stopping")
	if dyn := a.client(); dyn != nil && node.Err() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.StopTimeout)
		left, err := stopWorkload(ctx, dyn)
		cancel()
		switch {
		case err != nil:
			a.log.Warn("stopping the workload gracefully", "err", err, "pods_left", left)
		default:
			a.step("workload stopped")
		}
	}
	a.teardown(node)
	a.setPhase(PhaseStopped, "")
	a.log.Info("stopped", "seconds", seconds(time.Since(a.start)))
	return nil
}

// teardown stops the node's components, kills whatever is left in the cgroup root but the
// agent, and removes what the agent can of the cgroups. Host directories such as the kubelet's
// /var/log/containers are the distribution's to keep clean (see distro.Node's Stop).
func (a *agent) teardown(node distro.Node) {
	if node != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		if err := node.Stop(ctx); err != nil {
			a.log.Warn("stopping the node", "err", err)
		}
		cancel()
	}
	if root := a.cfg.CgroupRoot; root != "" && len(a.hs) > 0 {
		if left := cgroups.KillAll(a.hs, root, map[int]bool{os.Getpid(): true}, 3*time.Second); left > 0 {
			a.log.Warn("processes left in the cgroup root", "count", left)
		}
		keep := map[string]bool{root: true, path.Join(root, "system"): true}
		if err := cgroups.Remove(a.hs, root, keep); err != nil {
			a.log.Debug("removing cgroups", "err", err)
		}
	}
}
